package contentcoding

import (
	"bytes"
	"fmt"
	"io"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// CompressBest returns src encoded with c at the coding's best (slowest) level: for bodies
// compressed once and served many times, as nginx's gzip_static serves a .gz made ahead.
// The output is deterministic, so a test can compare it with a fresh compression.
func CompressBest(c Coding, src []byte) ([]byte, error) {
	var buf bytes.Buffer
	var w io.WriteCloser
	switch c {
	case Identity:
		return bytes.Clone(src), nil
	case Gzip:
		gw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return nil, fmt.Errorf("compress gzip: %w", err)
		}
		w = gw
	case Zstd:
		// One goroutine, no dictionary, checksum on: what a decoder expects from zstd -19.
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("compress zstd: %w", err)
		}
		w = zw
	case Br:
		w = brotli.NewWriterLevel(&buf, brotli.BestCompression)
	default:
		return nil, fmt.Errorf("compress: unknown coding %v", c)
	}
	if _, err := w.Write(src); err != nil {
		return nil, fmt.Errorf("compress %v: %w", c, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("compress %v: %w", c, err)
	}
	return buf.Bytes(), nil
}

// Decompress decodes a body of coding c, refusing one that decodes to more than limit
// bytes (a client's defence against a decompression bomb).
func Decompress(c Coding, body []byte, limit int64) ([]byte, error) {
	var r io.Reader
	switch c {
	case Identity:
		return body, nil
	case Gzip:
		gr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("decompress gzip: %w", err)
		}
		defer gr.Close()
		r = gr
	case Zstd:
		zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("decompress zstd: %w", err)
		}
		defer zr.Close()
		r = zr
	case Br:
		r = brotli.NewReader(bytes.NewReader(body))
	default:
		return nil, fmt.Errorf("decompress: unknown coding %v", c)
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("decompress %v: %w", c, err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("decompress %v: more than %d bytes", c, limit)
	}
	return out, nil
}
