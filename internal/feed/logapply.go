package feed

// The apply: the log's messages into this host's file, in the log's order, one transaction
// per batch of messages, and the last sequence applied stored in the same transaction, so
// the file always says exactly which writes it holds (a crash loses both or neither).
//
// Where the sequence lives, without changing the challenge's schema: the database header's
// two free 32-bit fields, PRAGMA user_version (the low 32 bits) and PRAGMA application_id
// (the high 32 bits), both written in the transaction like any page. (user_version alone
// would run out after 2^31 messages: about 12 days at the 2,000 writes/s of the measured
// fleet if every write were its own message.)
//
// The apply is deterministic, so every host computes the same rows and the same answers:
// created_at comes from the message (chosen by its publisher), a post's id is SQLite's
// rowid choice, one more than the largest id, which depends on the file's content alone,
// and "already liked" and "post not found" are read from the state the earlier messages
// left. Messages at or below the stored sequence are skipped (an applier that starts
// again may be handed them), so an applier never applies a message twice.
//
// Message (version 1): 0x01, created_at (24 bytes, YYYY-MM-DDTHH:MM:SS.mmmZ), then intents:
//
//	'L' user_id(8) post_id(8)          a like
//	'P' user_id(8) length(2) body      a post
//
// Integers are big endian.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/sqlitec"
	"github.com/onehost/onehost/internal/writepath"
)

const (
	intentsVersion = 1
	createdAtLen   = 24
	// createdAtLayout is the schema's timestamp format (strftime('%Y-%m-%dT%H:%M:%fZ')).
	createdAtLayout = "2006-01-02T15:04:05.000Z"
)

// errBadMessage is a message this version cannot read: every host skips it alike.
var errBadMessage = errors.New("malformed message in the write log")

// appendIntents encodes batch as one message, created at now.
func appendIntents(dst []byte, batch []*op, now time.Time) []byte {
	dst = append(dst, intentsVersion)
	dst = now.UTC().AppendFormat(dst, createdAtLayout)
	for _, o := range batch {
		dst = append(dst, o.kind)
		dst = binary.BigEndian.AppendUint64(dst, uint64(o.userID))
		if o.kind == opLike {
			dst = binary.BigEndian.AppendUint64(dst, uint64(o.postID))
			continue
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(o.body)))
		dst = append(dst, o.body...)
	}
	return dst
}

// intent is one decoded write of a message.
type intent struct {
	kind           byte
	userID, postID int64
	body           []byte
}

// nextIntent decodes the intent at the start of b and returns the rest.
func nextIntent(b []byte) (intent, []byte, error) {
	if len(b) < 9 {
		return intent{}, nil, fmt.Errorf("%w: intent of %d bytes", errBadMessage, len(b))
	}
	in := intent{kind: b[0], userID: int64(binary.BigEndian.Uint64(b[1:]))}
	b = b[9:]
	switch in.kind {
	case opLike:
		if len(b) < 8 {
			return intent{}, nil, fmt.Errorf("%w: like cut short", errBadMessage)
		}
		in.postID = int64(binary.BigEndian.Uint64(b))
		return in, b[8:], nil
	case opPost:
		if len(b) < 2 {
			return intent{}, nil, fmt.Errorf("%w: post cut short", errBadMessage)
		}
		n := int(binary.BigEndian.Uint16(b))
		if n == 0 || n > maxBodyBytes || len(b) < 2+n {
			return intent{}, nil, fmt.Errorf("%w: post body of %d bytes", errBadMessage, n)
		}
		in.body = b[2 : 2+n]
		return in, b[2+n:], nil
	}
	return intent{}, nil, fmt.Errorf("%w: intent kind %q", errBadMessage, in.kind)
}

// splitMessage checks a message's head and returns its created_at and its intents.
func splitMessage(data []byte) (createdAt, intents []byte, err error) {
	if len(data) < 1+createdAtLen || data[0] != intentsVersion {
		return nil, nil, fmt.Errorf("%w: head of %d bytes", errBadMessage, len(data))
	}
	return data[1 : 1+createdAtLen], data[1+createdAtLen:], nil
}

// intentResult is what applying one intent gave.
type intentResult struct {
	created bool  // a like inserted (not already there)
	id      int64 // a post's id
	err     error // ErrPostNotFound, a constraint, errBadMessage
}

// logStmts are the apply's statements on the writer connection (prepared at its first
// apply: a Store without a log never has them).
type logStmts struct {
	insertPost, insertLike, userVersion, appID sqlitec.Stmt
}

const (
	sqlInsertPostAt = `INSERT INTO posts(user_id, body, created_at) VALUES(?1, ?2, ?3) RETURNING id`
	sqlInsertLikeAt = `INSERT INTO likes(user_id, post_id, created_at) VALUES(?1, ?2, ?3) ON CONFLICT DO NOTHING`
)

// applyMsgs applies msgs in one transaction. It appends one result per intent of each
// message it applied to results, and sets bounds[i] to message i's first result (-1:
// skipped, applied before). It returns the sequence the file holds afterwards.
func (s *Store) applyMsgs(msgs []LogMsg, results []intentResult, bounds []int) ([]intentResult, []int, uint64, error) {
	bounds = bounds[:0]
	if s.shared {
		r, err := s.getReader()
		if err != nil {
			return results, bounds, 0, err
		}
		defer s.putReader(r)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	w := s.writer
	if w == nil {
		return results, bounds, 0, errClosed
	}
	if err := checkNotMoved(w.Conn); err != nil {
		return results, bounds, 0, err
	}
	c := w.Conn
	if s.ls == nil {
		ls := &logStmts{}
		if err := prepareAll(c, []prepared{{&ls.insertPost, sqlInsertPostAt}, {&ls.insertLike, sqlInsertLikeAt},
			{&ls.userVersion, `PRAGMA user_version`}, {&ls.appID, `PRAGMA application_id`}}); err != nil {
			return results, bounds, 0, fmt.Errorf("prepare the apply: %w", err)
		}
		s.ls = ls
	}
	began := writepath.Now()
	rc := s.first(c, w.begin)
	c.Reset(w.begin)
	if rc != sqlite3.SQLITE_DONE {
		return results, bounds, 0, fmt.Errorf("begin apply: %w", c.ErrorFor(rc))
	}
	fail := func(err error) ([]intentResult, []int, uint64, error) {
		return results, bounds, 0, w.rollbackOn(err)
	}
	stored, err := s.readPosition(c)
	if err != nil {
		return fail(err)
	}
	last, n := stored, 0
	for _, m := range msgs {
		if m.Seq <= last {
			bounds = append(bounds, -1)
			continue
		}
		bounds = append(bounds, len(results))
		createdAt, rest, err := splitMessage(m.Data)
		if err != nil {
			// Unreadable: applied as nothing, on every host alike.
			last = m.Seq
			continue
		}
		for len(rest) > 0 {
			in, more, err := nextIntent(rest)
			if err != nil {
				results = append(results, intentResult{err: err})
				break
			}
			rest = more
			var r intentResult
			if err := s.applyIntent(w, in, createdAt, &r); err != nil {
				return fail(fmt.Errorf("apply message %d: %w", m.Seq, err))
			}
			results = append(results, r)
			n++
		}
		last = m.Seq
	}
	if last == stored {
		return fail(nil) // nothing new: roll back the empty transaction
	}
	lo, hi := splitPosition(last)
	if err := c.Exec("PRAGMA user_version=" + strconv.FormatInt(lo, 10) + "; PRAGMA application_id=" + strconv.FormatInt(hi, 10)); err != nil {
		return fail(fmt.Errorf("store the applied sequence: %w", err))
	}
	rc = c.Step(w.commit)
	c.Reset(w.commit)
	if rc != sqlite3.SQLITE_DONE {
		return fail(fmt.Errorf("commit apply: %w", c.ErrorFor(rc)))
	}
	s.noteCommit()
	s.wp.Commit(began, max(n, 1))
	return results, bounds, last, nil
}

// applyIntent runs one intent; r gets its result. It returns an error only for a failure
// that ends the whole transaction (as insertLike and insertPost, whose steps it shares).
func (s *Store) applyIntent(w *writer, in intent, createdAt []byte, r *intentResult) error {
	c, ls := w.Conn, s.ls
	var err error
	switch in.kind {
	case opLike:
		st := ls.insertLike
		c.BindInt64(st, 1, in.userID)
		c.BindInt64(st, 2, in.postID)
		c.BindText(st, 3, string(createdAt))
		r.created, r.err, err = s.stepLike(w, st, in.postID)
	default: // opPost
		st := ls.insertPost
		c.BindInt64(st, 1, in.userID)
		c.BindText(st, 2, string(in.body))
		c.BindText(st, 3, string(createdAt))
		r.id, _, r.err, err = stepPost(c, st, nil)
	}
	return err
}

// readPosition reads the sequence the file holds (see the top of this file), on the writer
// connection (wmu held).
func (s *Store) readPosition(c *sqlitec.Conn) (uint64, error) {
	var v [2]int64
	for i, st := range []sqlitec.Stmt{s.ls.userVersion, s.ls.appID} {
		rc := s.first(c, st)
		if rc != sqlite3.SQLITE_ROW {
			err := c.ErrorFor(rc)
			c.Reset(st)
			return 0, fmt.Errorf("read the applied sequence: %w", err)
		}
		v[i] = c.ColumnInt64(st, 0)
		c.Reset(st)
	}
	return joinPosition(v[0], v[1]), nil
}

// positionOf reads the sequence the database at c holds, from its header.
func positionOf(c *sqlitec.Conn) (uint64, error) {
	lo, err := c.QueryText("PRAGMA user_version")
	if err != nil {
		return 0, err
	}
	hi, err := c.QueryText("PRAGMA application_id")
	if err != nil {
		return 0, err
	}
	l, err1 := strconv.ParseInt(lo, 10, 64)
	h, err2 := strconv.ParseInt(hi, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return joinPosition(l, h), nil
}

// joinPosition is the sequence held by the header's user_version (lo, its low 32 bits)
// and application_id (hi, its high 32 bits), as SQLite reads them: signed 32-bit values.
func joinPosition(lo, hi int64) uint64 { return uint64(uint32(lo)) | uint64(uint32(hi))<<32 }

// splitPosition is joinPosition's inverse: the values to write into the header.
func splitPosition(seq uint64) (lo, hi int64) {
	return int64(int32(uint32(seq))), int64(int32(uint32(seq >> 32)))
}

// logPosition is the sequence this Store's file holds.
func (s *Store) logPosition() (uint64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.writer == nil {
		return 0, errClosed
	}
	var pos uint64
	err := s.retryErr(func() (err error) {
		pos, err = positionOf(s.writer.Conn)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read the applied sequence: %w", err)
	}
	return pos, nil
}

// apply is the applier's callback: it applies msgs, then hands each batch of this
// process's own its results and queues it for the acker.
func (w *logWriter) apply(msgs []LogMsg) error {
	var last uint64
	var err error
	w.results, w.bounds, last, err = w.s.applyMsgs(msgs, w.results[:0], w.bounds[:0])
	bounds := w.bounds
	if err != nil {
		return err
	}
	w.lastApplied.Store(last)
	for i, m := range msgs {
		if bounds[i] < 0 || len(m.ID) < len(w.prefix) || m.ID[:len(w.prefix)] != w.prefix {
			continue
		}
		pb := w.claim(m.ID)
		if pb == nil {
			continue // answered already (undecided)
		}
		end := len(w.results)
		if i+1 < len(bounds) {
			for _, b := range bounds[i+1:] {
				if b >= 0 {
					end = b
					break
				}
			}
		}
		res := w.results[bounds[i]:end]
		createdAt, _, _ := splitMessage(m.Data)
		if len(res) != len(pb.ops) {
			w.fail(pb, fmt.Errorf("%w: %d results for %d writes", errBadMessage, len(res), len(pb.ops)))
			continue
		}
		for j, o := range pb.ops {
			o.err, o.created, o.id = res[j].err, res[j].created, res[j].id
			o.nCreated = 0
			if o.kind == opPost && o.err == nil {
				o.nCreated = copy(o.createdAt[:], createdAt)
			}
		}
		pb.seq = m.Seq
		w.acks <- pb
	}
	return nil
}
