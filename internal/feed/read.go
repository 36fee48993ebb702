package feed

import (
	"fmt"
	"strconv"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/jsonstr"
)

// getReader takes an idle read connection, waiting for one if all are busy.
func (s *Store) getReader() (*reader, error) {
	r, ok := <-s.readers
	if !ok {
		return nil, errClosed
	}
	return r, nil
}

func (s *Store) putReader(r *reader) { s.readers <- r }

// AppendPost appends {"post":{...}} for the post id to dst, or returns ErrPostNotFound.
func (s *Store) AppendPost(dst []byte, id int64) ([]byte, error) {
	r, err := s.getReader()
	if err != nil {
		return dst, fmt.Errorf("read post %d: %w", id, err)
	}
	defer s.putReader(r)
	c, st := r.Conn, r.post
	c.BindInt64(st, 1, id)
	rc := s.first(c, st)
	defer c.Reset(st)
	switch rc {
	case sqlite3.SQLITE_ROW:
	case sqlite3.SQLITE_DONE:
		return dst, ErrPostNotFound
	default:
		return dst, fmt.Errorf("read post %d: %w", id, c.ErrorFor(rc))
	}
	dst = append(dst, `{"post":`...)
	dst = appendPostHead(dst, id, c.ColumnText(st, 0), c.ColumnText(st, 1), c.ColumnText(st, 2))
	dst = strconv.AppendInt(dst, c.ColumnInt64(st, 3), 10)
	return append(dst, '}', '}'), nil
}

// feedMaxSpan bounds the id range AppendFeed counts likes over in one scan.
const feedMaxSpan = 64

// AppendFeed appends {"posts":[...]} with the FeedSize newest posts (by created_at, then
// id, both descending) to dst.
//
// It runs two statements in one read transaction: the newest posts without their like
// counts (their JSON goes to a scratch buffer, up to "like_count":), then one range scan
// of likes_post_id_idx over the posts' id range, grouped by post_id. The newest posts
// have nearly consecutive ids (ids and created_at both grow with time), so the scan
// touches little besides their own likes, and it replaces twenty index seeks: this
// measured ~10–15 % faster than a correlated count subquery per row, ~40 % faster than
// SQLite building the JSON (BenchmarkFeed). When the ids are spread wider than
// feedMaxSpan, each post is counted on its own instead. The counting statement runs
// while the first one is still open (it has not returned SQLITE_DONE), so both read the
// same snapshot; only a database with fewer than FeedSize posts ends the first
// transaction before the counts are read.
func (s *Store) AppendFeed(dst []byte) ([]byte, error) {
	r, err := s.getReader()
	if err != nil {
		return dst, fmt.Errorf("read feed: %w", err)
	}
	defer s.putReader(r)
	c, top := r.Conn, r.feedTop
	defer c.Reset(top)
	var (
		ids  [FeedSize]int64
		ends [FeedSize]int // the end of post i's JSON in scratch
		n    int
	)
	scratch := r.scratch[:0]
	rc := s.first(c, top)
	for rc == sqlite3.SQLITE_ROW {
		ids[n] = c.ColumnInt64(top, 0)
		scratch = appendPostHead(scratch, ids[n], c.ColumnText(top, 1), c.ColumnText(top, 2), c.ColumnText(top, 3))
		ends[n] = len(scratch)
		if n++; n == FeedSize {
			break // keep top open: its transaction is the snapshot for the counts
		}
		rc = c.Step(top)
	}
	r.scratch = scratch
	if rc != sqlite3.SQLITE_ROW && rc != sqlite3.SQLITE_DONE {
		return dst, fmt.Errorf("read feed: %w", c.ErrorFor(rc))
	}
	var counts [FeedSize]int64
	if err := s.countLikes(r, ids[:n], counts[:n]); err != nil {
		return dst, fmt.Errorf("read feed: %w", err)
	}
	dst = append(dst, `{"posts":[`...)
	start := 0
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, scratch[start:ends[i]]...)
		dst = strconv.AppendInt(dst, counts[i], 10)
		dst = append(dst, '}')
		start = ends[i]
	}
	return append(dst, ']', '}'), nil
}

// countLikes sets counts[i] to the number of likes of the post ids[i].
func (s *Store) countLikes(r *reader, ids, counts []int64) error {
	if len(ids) == 0 {
		return nil
	}
	c := r.Conn
	lo, hi := ids[0], ids[0]
	for _, id := range ids {
		lo, hi = min(lo, id), max(hi, id)
	}
	if uint64(hi-lo) >= feedMaxSpan { // also when hi-lo overflows
		st := r.likeCount
		for i, id := range ids {
			c.BindInt64(st, 1, id)
			rc := s.first(c, st)
			if rc != sqlite3.SQLITE_ROW {
				err := c.ErrorFor(rc)
				c.Reset(st)
				return fmt.Errorf("count likes: %w", err)
			}
			counts[i] = c.ColumnInt64(st, 0)
			c.Reset(st)
		}
		return nil
	}
	st := r.feedLikes
	defer c.Reset(st)
	c.BindInt64(st, 1, lo)
	c.BindInt64(st, 2, hi)
	var byOffset [feedMaxSpan]int64 // likes of post lo+i
	rc := s.first(c, st)
	for ; rc == sqlite3.SQLITE_ROW; rc = c.Step(st) {
		byOffset[c.ColumnInt64(st, 0)-lo] = c.ColumnInt64(st, 1)
	}
	if rc != sqlite3.SQLITE_DONE {
		return fmt.Errorf("count likes: %w", c.ErrorFor(rc))
	}
	for i, id := range ids {
		counts[i] = byOffset[id-lo]
	}
	return nil
}

// appendPostHead appends a post object, keys in the contract's order, up to the value of
// like_count, which the caller appends followed by '}'.
func appendPostHead[T ~string | ~[]byte](dst []byte, id int64, body T, createdAt, author []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"body":`...)
	dst = jsonstr.Append(dst, body)
	dst = append(dst, `,"created_at":`...)
	dst = jsonstr.Append(dst, createdAt)
	dst = append(dst, `,"author":`...)
	dst = jsonstr.Append(dst, author)
	return append(dst, `,"like_count":`...)
}
