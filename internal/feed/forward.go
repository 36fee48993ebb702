package feed

// Where a write runs. With WritesOwner, the processes that serve one database file elect
// one write owner (internal/owner); a follower sends each write to it as a message and waits
// for the answer, which the owner sends after the COMMIT that holds the write. The owner runs
// its own writes in process, with no hop. While there is no owner to send to (an election
// is under way, or the owner has stopped answering) a follower commits its writes itself,
// in its own batches, under SQLite's lock: the owner makes writes cheap, SQLite's locking
// keeps them correct either way.
//
// The messages (payloads of internal/owner's frames):
//
//	request: 'L' user_id(8) post_id(8)      a like
//	         'P' user_id(8) body...          a post (body: the rest)
//	answer:  'o' created(1)                  a like done (1: inserted, 201)
//	         'o' id(8) created_at...         a post done
//	         'n'                             the post does not exist (404)
//	         'm'                             the owner's path names another file (ErrFileMoved)
//	         'u'                             the fleet's log did not take it in time (ErrLogUndecided)
//	         'e' message...                  failed (500)
//
// Integers are big endian.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/onehost/onehost/internal/owner"
	"github.com/onehost/onehost/internal/writepath"
)

// Answer statuses.
const (
	ansOK       = 'o'
	ansNotFound = 'n'
	ansMoved    = 'm'
	ansLogLate  = 'u'
	ansFailed   = 'e'
)

// errMalformed reports a message that is not one of this protocol.
var errMalformed = errors.New("malformed write message")

// exec runs o, forwarded to the write owner or in this process, and returns when o has its
// result.
func (s *Store) exec(o *op) {
	start := writepath.Now()
	for s.node != nil {
		o.wire = appendRequest(o.wire[:0], o)
		ans, err := s.node.Forward(o.wire, o.wire[len(o.wire):])
		switch {
		case err == nil:
			if err := decodeAnswer(ans, o); err != nil {
				o.err = fmt.Errorf("answer of the write owner: %w", err)
			}
			s.wp.Write(start, true)
			return
		case !errors.Is(err, owner.ErrNoOwner):
			o.err = err // undecided: ErrOwnerLost or ErrOwnerTimeout
			s.wp.Write(start, true)
			return
		}
		// In a fleet only the owner publishes (and applies): a follower waits for one.
		if s.flog == nil || s.node.Role() == owner.RoleOwner {
			break
		}
		if s.flog.waitForOwner(o, start) {
			s.wp.Write(start, true)
			return
		}
	}
	s.batch.submit(o)
	<-o.done
	s.wp.Write(start, false)
}

// serveForwarded is the owner's side: a follower's write joins the next batch, and the
// batcher answers it after the commit (op.finish).
func (s *Store) serveForwarded(p *owner.Peer, id uint64, payload []byte) {
	o := getOp()
	if err := decodeRequest(payload, o); err != nil {
		o.err = err
		o.wire = appendAnswer(o.wire[:0], o)
		p.Reply(id, o.wire)
		putOp(o)
		return
	}
	o.peer, o.req = p, id
	s.batch.submit(o)
}

func appendRequest(dst []byte, o *op) []byte {
	dst = append(dst, o.kind)
	dst = binary.BigEndian.AppendUint64(dst, uint64(o.userID))
	if o.kind == opLike {
		return binary.BigEndian.AppendUint64(dst, uint64(o.postID))
	}
	return append(dst, o.body...)
}

// decodeRequest sets o's kind and parameters from a request message.
func decodeRequest(b []byte, o *op) error {
	if len(b) < 1+8 {
		return fmt.Errorf("%w: request of %d bytes", errMalformed, len(b))
	}
	o.kind, o.userID = b[0], int64(binary.BigEndian.Uint64(b[1:]))
	switch o.kind {
	case opLike:
		if len(b) != 1+8+8 {
			return fmt.Errorf("%w: like of %d bytes", errMalformed, len(b))
		}
		o.postID = int64(binary.BigEndian.Uint64(b[9:]))
	case opPost:
		if len(b) == 1+8 || len(b) > 1+8+maxBodyBytes {
			return fmt.Errorf("%w: post body of %d bytes", errMalformed, len(b)-9)
		}
		o.body = string(b[9:])
	default:
		return fmt.Errorf("%w: kind %q", errMalformed, o.kind)
	}
	return nil
}

// maxBodyBytes bounds a post body in a message: 500 characters of up to 4 bytes.
const maxBodyBytes = 4 * 500

// appendAnswer appends the answer to o, which is done.
func appendAnswer(dst []byte, o *op) []byte {
	switch {
	case errors.Is(o.err, ErrPostNotFound):
		return append(dst, ansNotFound)
	case errors.Is(o.err, ErrFileMoved):
		return append(dst, ansMoved)
	case errors.Is(o.err, ErrLogUndecided):
		return append(dst, ansLogLate)
	case o.err != nil:
		return append(append(dst, ansFailed), o.err.Error()...)
	case o.kind == opLike:
		created := byte(0)
		if o.created {
			created = 1
		}
		return append(dst, ansOK, created)
	default:
		dst = append(dst, ansOK)
		dst = binary.BigEndian.AppendUint64(dst, uint64(o.id))
		return append(dst, o.createdAt[:o.nCreated]...)
	}
}

// decodeAnswer sets o's result from the owner's answer to it.
func decodeAnswer(b []byte, o *op) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty answer", errMalformed)
	}
	switch b[0] {
	case ansNotFound:
		o.err = ErrPostNotFound
		return nil
	case ansMoved:
		o.err = ErrFileMoved
		return nil
	case ansLogLate:
		o.err = ErrLogUndecided
		return nil
	case ansFailed:
		o.err = &ownerError{msg: string(b[1:])}
		return nil
	case ansOK:
	default:
		return fmt.Errorf("%w: answer %q", errMalformed, b[0])
	}
	switch o.kind {
	case opLike:
		if len(b) != 2 || b[1] > 1 {
			return fmt.Errorf("%w: like answer of %d bytes", errMalformed, len(b))
		}
		o.created = b[1] == 1
	case opPost:
		if len(b) < 1+8 || len(b) > 1+8+len(o.createdAt) {
			return fmt.Errorf("%w: post answer of %d bytes", errMalformed, len(b))
		}
		o.id = int64(binary.BigEndian.Uint64(b[1:]))
		o.nCreated = copy(o.createdAt[:], b[9:])
	}
	return nil
}

// ownerError is a write that failed at the owner, with the owner's message.
type ownerError struct{ msg string }

func (e *ownerError) Error() string { return "write failed at the write owner: " + e.msg }
