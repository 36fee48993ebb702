package main

import (
	"errors"

	"github.com/onehost/onehost/internal/contentcoding"
)

// maxDecoded bounds one decoded body: a body that inflates past it is counted bad rather
// than allowed to take the generator's memory (a decompression bomb, or a stream gone
// wrong).
const maxDecoded = 256 << 20

// checkBody is --check-decode's check of one response (loadgen.Config.CheckBody): a body
// sent with a Content-Encoding must decode as that coding. No body (HEAD, 304, 204) and
// no coding pass; a coding this generator cannot decode, or a list of codings, fails.
// Safe for the loops' goroutines at once: each decode has its own reader.
func checkBody(coding string, body []byte) error {
	if len(body) == 0 || coding == "" {
		return nil
	}
	c, err := contentcoding.Parse(coding)
	if err != nil {
		return errors.Join(errors.New("check body"), err)
	}
	_, err = contentcoding.Decompress(c, body, maxDecoded)
	return err
}
