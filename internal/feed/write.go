package feed

import (
	"errors"
	"fmt"
	"strconv"
)

// CreatePost inserts a post by userID with the text body (already checked by
// ParseCreateBody) and appends {"post":{...}} to dst: created_at is the column default,
// author is username as given (the token's claim, not looked up), like_count is 0. A
// userID without a users row fails the foreign key: a plain error. It returns once the
// commit that holds the post has returned (see batch.go).
func (s *Store) CreatePost(dst []byte, userID int64, username []byte, body string) ([]byte, error) {
	o := getOp()
	defer putOp(o)
	o.kind, o.userID, o.body = opPost, userID, body
	s.exec(o)
	if o.err != nil {
		return dst, fmt.Errorf("create post: %w", o.err)
	}
	dst = append(dst, `{"post":`...)
	dst = appendPostHead(dst, o.id, body, o.createdAt[:o.nCreated], username)
	return append(dst, '0', '}', '}'), nil
}

// Like records that userID likes postID and appends {"liked":true,"already_liked":...,
// "post_id":postID} to dst; created is false when the like existed. A missing post is
// ErrPostNotFound; any other failure (a userID without a users row) is a plain error.
// It returns once the commit that holds the like has returned.
func (s *Store) Like(dst []byte, userID, postID int64) ([]byte, bool, error) {
	o := getOp()
	defer putOp(o)
	o.kind, o.userID, o.postID = opLike, userID, postID
	s.exec(o)
	if o.err != nil {
		if errors.Is(o.err, ErrPostNotFound) {
			return dst, false, ErrPostNotFound
		}
		return dst, false, fmt.Errorf("like post %d: %w", postID, o.err)
	}
	dst = append(dst, `{"liked":true,"already_liked":`...)
	dst = strconv.AppendBool(dst, !o.created)
	dst = append(dst, `,"post_id":`...)
	dst = strconv.AppendInt(dst, postID, 10)
	return append(dst, '}'), o.created, nil
}
