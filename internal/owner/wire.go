package owner

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame kinds.
const (
	kindRequest = 'q' // follower → owner: a request, answered once with the same id
	kindAnswer  = 'a' // owner → follower: the answer to the request with this id
	kindGoaway  = 'g' // owner → follower: send nothing more; answers to what was sent still come
	kindHello   = 'h' // owner → follower, first: the owner has accepted the connection
)

// headerLen is a frame's fixed part: length (u32, of what follows it), kind, id (u64).
const headerLen = 4 + 1 + 8

// MaxPayload bounds one request or answer, so that a confused peer cannot make the other
// side buffer without limit. A feed write is at most ~2 KB (a 500-character post).
const MaxPayload = 60 << 10

// errFrame reports bytes that are not a frame of this protocol.
var errFrame = errors.New("malformed frame")

// appendFrame appends one frame to dst.
func appendFrame(dst []byte, kind byte, id uint64, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(1+8+len(payload)))
	dst = append(dst, kind)
	dst = binary.BigEndian.AppendUint64(dst, id)
	return append(dst, payload...)
}

// readFrame reads the next frame from br, whose buffer must hold headerLen+MaxPayload
// bytes. The payload points into br's buffer: it is valid until the next read from br.
// io.EOF means the peer closed cleanly between frames.
func readFrame(br *bufio.Reader) (kind byte, id uint64, payload []byte, err error) {
	h, err := br.Peek(headerLen)
	if err != nil {
		if errors.Is(err, io.EOF) && len(h) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(h)
	if n < 1+8 || n > 1+8+MaxPayload {
		return 0, 0, nil, fmt.Errorf("read frame: %w: length %d", errFrame, n)
	}
	kind = h[4]
	switch kind {
	case kindRequest, kindAnswer, kindGoaway, kindHello:
	default:
		return 0, 0, nil, fmt.Errorf("read frame: %w: kind %q", errFrame, kind)
	}
	id = binary.BigEndian.Uint64(h[5:])
	full, err := br.Peek(4 + int(n))
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, fmt.Errorf("read frame: %w", err)
	}
	// Discard keeps the bytes in the buffer; only the next Peek or Read may move them.
	br.Discard(len(full))
	return kind, id, full[headerLen:], nil
}
