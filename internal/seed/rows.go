package seed

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// The seed's row counts.
const (
	NumUsers = 50_000
	NumPosts = 500_000
	NumLikes = 2_016_005
)

// The reference's time constants, in milliseconds since the Unix epoch.
const (
	endMs = 1_767_225_600_000 // 2026-01-01T00:00:00Z
	dayMs = 86_400_000
)

// The like-count parameters. They are variables, not constants, on purpose: Go folds
// constant expressions exactly, while the reference evaluates them in float64, and the two
// can differ in the last bit.
var (
	likesTotal = 2_000_000.0
	popularP   = 0.01
	popularMul = 20.0
)

// TimeLayout is the wire format of every timestamp in the database.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// User is one row of the users table, as stored.
type User struct {
	ID        int64
	Username  string
	CreatedAt string
}

// Post is one row of the posts table, as stored.
type Post struct {
	ID        int64
	UserID    int64
	Body      string
	CreatedAt string
}

// Like is one row of the likes table, as stored.
type Like struct {
	UserID    int64
	PostID    int64
	CreatedAt string
}

// rowSink receives the rows in the order the reference draws them. A nil function skips
// that kind of row (the draws still happen, since everything shares one stream). Returning
// errStopRows ends the walk early without an error.
type rowSink struct {
	user func(User) error
	post func(Post) error
	like func(Like) error
}

// errStopRows lets a sink end walkRows once it has what it needs.
var errStopRows = errors.New("stop rows")

// walkRows draws the whole seed from the reference's random stream and hands each row to s.
func walkRows(s rowSink) error {
	err := drawRows(s)
	if errors.Is(err, errStopRows) {
		return nil
	}
	return err
}

func drawRows(s rowSink) error {
	rng := newMulberry32(42)
	var buf []byte

	userBase := float64(endMs - 730*dayMs)
	for id := int64(1); id <= NumUsers; id++ {
		adj := pick(rng, adjectives)
		noun := pick(rng, nouns)
		buf = append(append(append(append(buf[:0], adj...), '_'), noun...), '_')
		name := string(strconv.AppendInt(buf, id, 10))
		// float64() around each product keeps the compiler from fusing a multiply-add
		// (it does on arm64), which would round differently from the reference.
		created := userBase + float64(float64(rng.next()*365)*dayMs)
		if s.user != nil {
			if err := s.user(User{ID: id, Username: name, CreatedAt: formatMillis(created)}); err != nil {
				return err
			}
		}
	}

	postStart := float64(endMs - 365*dayMs)
	step := float64(365*dayMs) / float64(NumPosts)
	// postTimes keeps each post's untruncated time: its likes are drawn from it.
	postTimes := make([]float64, NumPosts)
	for i := range NumPosts {
		r1 := rng.next()
		r2 := rng.next()
		userID := 1 + int64(float64(NumUsers*r1)*r2)
		created := float64(postStart+float64(float64(i)*step)) + float64(float64(rng.next()*step)*0.9)
		postTimes[i] = created
		buf = appendBody(buf[:0], rng)
		if s.post != nil {
			p := Post{ID: int64(i + 1), UserID: userID, Body: string(buf), CreatedAt: formatMillis(created)}
			if err := s.post(p); err != nil {
				return err
			}
		}
	}

	meanPerPost := likesTotal / float64(NumPosts)
	popularMean := meanPerPost * popularMul
	normalMean := math.Max(0.05, (meanPerPost-float64(popularP*popularMean)+0.5)/0.99)
	likeCap := math.Min(NumUsers, math.Max(50, math.Round(popularMean*10)))
	counts := make([]int32, NumPosts)
	for i := range counts {
		mean := normalMean
		if rng.next() < popularP {
			mean = popularMean
		}
		counts[i] = int32(math.Min(likeCap, math.Floor(-mean*math.Log(1-rng.next()))))
	}

	// likedBy[u] == post id marks that user u already liked the post being drawn; post
	// ids only grow, so the marks never need clearing.
	likedBy := make([]int32, NumUsers+1)
	for i, n := range counts {
		postID := int32(i + 1)
		for range n {
			u := rng.randInt(1, NumUsers)
			for likedBy[u] == postID {
				u = rng.randInt(1, NumUsers)
			}
			likedBy[u] = postID
			created := postTimes[i] + float64(float64(rng.next()*7)*dayMs)
			if s.like != nil {
				if err := s.like(Like{UserID: int64(u), PostID: int64(postID), CreatedAt: formatMillis(created)}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// appendBody draws one post body, in the reference's draw order: opener test, opener,
// sentence count, then per sentence its word count, words and ending.
func appendBody(b []byte, rng *mulberry32) []byte {
	if rng.next() < 0.25 {
		b = append(b, pick(rng, openers)...)
	}
	for range rng.randInt(1, 3) {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		first := len(b)
		for w := range rng.randInt(4, 14) {
			if w > 0 {
				b = append(b, ' ')
			}
			b = append(b, pick(rng, words)...)
		}
		// Every word is lower-case ASCII, so upper-casing the first byte is JavaScript's
		// toUpperCase of the first character.
		if c := b[first]; 'a' <= c && c <= 'z' {
			b[first] = c - 'a' + 'A'
		}
		b = append(b, pick(rng, endings)...)
	}
	// The reference cuts at 500 characters; with these lists no body gets near it, and
	// every character is one byte.
	if len(b) > 500 {
		b = append(b[:497], "..."...)
	}
	return b
}

// formatMillis writes a reference time the way JavaScript's new Date(ms).toISOString()
// does: the fractional millisecond is truncated toward zero.
func formatMillis(ms float64) string {
	return time.UnixMilli(int64(ms)).UTC().Format(TimeLayout)
}

// Users returns the seed's users in id order (Users()[i].ID == i+1). It draws only the
// start of the random stream, so it is cheap (a few milliseconds).
func Users() []User {
	users := make([]User, 0, NumUsers)
	_ = walkRows(rowSink{
		user: func(u User) error { users = append(users, u); return nil },
		post: func(Post) error { return errStopRows },
	})
	return users
}
