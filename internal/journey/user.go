package journey

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/onehost/onehost/internal/jsonstr"
	"github.com/onehost/onehost/internal/srcaddr"
)

// Indices into routes.
const (
	routeFeed = iota
	routePost
	routeLike
	routeCreate
)

// The journey's probabilities.
const (
	likeProbability   = 0.15
	createProbability = 0.02
)

// user is one virtual user: its own connection, token, random source and schedule.
type user struct {
	r       *runner
	vu      int // the user's number, from 1, across all processes
	tok     *Token
	rng     *rand.Rand
	sh      *shard
	dialer  net.Dialer
	startAt time.Time
	stopAt  time.Time // no request is sent that is due at or after this
	timer   *time.Timer
	req     []byte
	scratch []byte // createRequest's text and body
	ids     []int64

	mu   sync.Mutex // guards conn against interrupt, which ctx's end calls
	conn net.Conn
}

func (r *runner) newUser(i int) *user {
	c := r.cfg
	g := int64(c.FirstUser - 1 + i) // 0-based position among all users
	total := int64(c.TotalUsers)
	u := &user{
		r:   r,
		vu:  int(g) + 1,
		tok: &c.Tokens[int(g)%len(c.Tokens)],
		rng: rand.New(rand.NewPCG(c.Seed, uint64(g)+1)),
		sh:  r.shards[i%len(r.shards)],
		// Users start evenly over the ramp, and stop evenly over the ramp-down, the last
		// started first (as k6's ramping-vus does).
		startAt: r.start.Add(time.Duration(int64(c.Ramp) * g / total)),
		stopAt:  r.start.Add(c.Ramp + c.Hold + time.Duration(int64(c.RampDown)*(total-g)/total)),
		dialer:  net.Dialer{Timeout: c.Timeout},
	}
	if a := r.spread.For(int(g)); a.IsValid() {
		u.dialer.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
		u.dialer.Control = srcaddr.Control // bind() reserves no port: connect() picks it
	}
	return u
}

// think returns a uniform(lo, hi) seconds think time, divided by the time scale.
func (u *user) think(lo, hi float64) time.Duration {
	s := lo + u.rng.Float64()*(hi-lo)
	return time.Duration(s / u.r.cfg.TimeScale * float64(time.Second))
}

// run is the user's life: wait for its start, then iterate until its stop time or ctx.
func (u *user) run(ctx context.Context) {
	u.timer = time.NewTimer(time.Hour)
	u.timer.Stop()
	defer u.timer.Stop()
	stop := context.AfterFunc(ctx, u.interrupt)
	defer stop()
	defer u.closeConn()

	if !u.wait(ctx, u.startAt) {
		return
	}
	u.r.active.Add(1)
	defer u.r.active.Add(-1)

	due := u.startAt.Add(u.think(0, 5)) // the first iteration's spread
	for iter := 0; ; iter++ {
		if !u.wait(ctx, due) {
			return
		}
		u.sh.mu.Lock()
		u.sh.iterations++
		u.sh.mu.Unlock()

		status, end := u.do(ctx, routeFeed, u.feedRequest(), due, true)
		if status != http.StatusOK || len(u.ids) == 0 {
			u.sh.mu.Lock()
			u.sh.feedRetries++
			u.sh.mu.Unlock()
			due = end.Add(u.think(3, 7))
			continue
		}
		id := u.ids[u.rng.IntN(len(u.ids))]
		due = end.Add(u.think(3, 7))

		if !u.wait(ctx, due) {
			return
		}
		_, end = u.do(ctx, routePost, u.postRequest(id), due, false)
		due = end.Add(u.think(3, 8))

		like := u.rng.Float64() < likeProbability
		create := u.rng.Float64() < createProbability
		if like {
			if !u.wait(ctx, due) {
				return
			}
			_, due = u.do(ctx, routeLike, u.likeRequest(id), due, false)
		}
		if create {
			if !u.wait(ctx, due) {
				return
			}
			_, due = u.do(ctx, routeCreate, u.createRequest(iter, time.Now()), due, false)
		}
		due = due.Add(u.think(5, 15))
	}
}

// wait sleeps until t and reports true, or reports false if t is at or past the user's
// stop time (after sleeping until the stop time, so that the user counts as active as
// long as the stages say) or when ctx ends.
func (u *user) wait(ctx context.Context, t time.Time) bool {
	if !t.Before(u.stopAt) {
		u.sleep(ctx, u.stopAt)
		return false
	}
	return u.sleep(ctx, t)
}

// sleep sleeps until t; it reports false if ctx ended first.
func (u *user) sleep(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	u.timer.Reset(d)
	select {
	case <-ctx.Done():
		u.timer.Stop()
		return false
	case <-u.timer.C:
		return true
	}
}

// do sends one request due at due on the user's connection, dialing first if there is
// none, reads the response (keeping the post ids of a feed when feed is set), records it,
// and returns its status (0 on a transport error) and when it ended.
func (u *user) do(ctx context.Context, route int, req []byte, due time.Time, feed bool) (int, time.Time) {
	u.ids = u.ids[:0]
	if u.r.stall != nil {
		u.r.stall()
	}
	// Send lag, for the generator's verdict: the request was due when the think timer
	// before it was (or, with no think time, when the last response ended); it goes now.
	u.sh.lag.Record(time.Since(due))
	status, kind := u.roundTrip(ctx, req, feed)
	end := time.Now()
	if ctx.Err() != nil {
		return 0, end // interrupted by the end of the run: not the server's failure
	}
	u.r.record(u.sh, route, due, end, status, kind)
	return status, end
}

// roundTrip returns the response's status, or the kind of transport error.
func (u *user) roundTrip(ctx context.Context, req []byte, feed bool) (int, string) {
	c := u.currentConn()
	if c == nil {
		t0 := time.Now()
		nc, err := u.dialer.DialContext(ctx, "tcp", u.r.tgt.addr)
		u.sh.dial.Record(time.Since(t0))
		if err != nil {
			return 0, errKind("connect", err)
		}
		if !u.setConn(ctx, nc) {
			return 0, "connect"
		}
		c = nc
	}
	c.SetDeadline(time.Now().Add(u.r.cfg.Timeout))
	if _, err := c.Write(req); err != nil {
		u.closeConn()
		return 0, errKind("write", err)
	}
	br := u.r.readers.Get().(*bufio.Reader)
	br.Reset(c)
	defer func() {
		br.Reset(nil)
		u.r.readers.Put(br)
	}()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		u.closeConn()
		return 0, errKind("read", err)
	}
	if feed && resp.StatusCode == http.StatusOK {
		buf := u.r.bodies.Get().(*bytes.Buffer)
		buf.Reset()
		_, err = buf.ReadFrom(resp.Body)
		u.ids = appendPostIDs(u.ids, buf.Bytes())
		u.r.bodies.Put(buf)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	if err != nil {
		u.ids = u.ids[:0]
		u.closeConn()
		return 0, errKind("read", err)
	}
	// Nothing may follow a response we did not ask for; if something does, the
	// connection's framing is lost.
	if resp.Close || br.Buffered() > 0 {
		u.closeConn()
	}
	return resp.StatusCode, ""
}

// errKind names a transport error for the result's error counts.
func errKind(op string, err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return op
}

func (u *user) currentConn() net.Conn {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conn
}

// setConn installs a new connection, unless the run has ended meanwhile.
func (u *user) setConn(ctx context.Context, c net.Conn) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if ctx.Err() != nil {
		c.Close()
		return false
	}
	u.conn = c
	return true
}

func (u *user) closeConn() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn != nil {
		u.conn.Close()
		u.conn = nil
	}
}

// interrupt ends a request in flight when the run's context ends.
func (u *user) interrupt() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn != nil {
		u.conn.SetDeadline(time.Unix(1, 0))
	}
}

// startRequest begins a request line in u.req: the method and the target's path prefix;
// the caller appends the path and calls endRequestLine. Built in place, so a request
// allocates nothing once u.req has grown.
func (u *user) startRequest(method string) {
	u.req = append(u.req[:0], method...)
	u.req = append(u.req, ' ')
	u.req = append(u.req, u.r.tgt.prefix...)
}

// endRequestLine ends the request line and writes the headers every request has.
func (u *user) endRequestLine() {
	u.req = append(u.req, " HTTP/1.1\r\nHost: "...)
	u.req = append(u.req, u.r.tgt.host...)
	u.req = append(u.req, "\r\nUser-Agent: onehost-journey\r\n"...)
}

func (u *user) feedRequest() []byte {
	u.startRequest("GET")
	u.req = append(u.req, "/feed"...)
	u.endRequestLine()
	u.req = append(u.req, "\r\n"...)
	return u.req
}

func (u *user) postRequest(id int64) []byte {
	u.startRequest("GET")
	u.req = append(u.req, "/posts/"...)
	u.req = strconv.AppendInt(u.req, id, 10)
	u.endRequestLine()
	u.req = append(u.req, "\r\n"...)
	return u.req
}

// likeRequest is POST /posts/:id/like as the challenge's script sends it: the token,
// a JSON content type and an empty body.
func (u *user) likeRequest(id int64) []byte {
	u.startRequest("POST")
	u.req = append(u.req, "/posts/"...)
	u.req = strconv.AppendInt(u.req, id, 10)
	u.req = append(u.req, "/like"...)
	u.endRequestLine()
	u.req = append(u.req, "Authorization: Bearer "...)
	u.req = append(u.req, u.tok.Token...)
	u.req = append(u.req, "\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"...)
	return u.req
}

// createRequest is POST /posts with the body text
// "<username> says hi at <ISO time> (VU n, iter i)", the time as JavaScript's
// toISOString writes it and i counted from 0 (k6's __ITER), quoted as encoding/json
// quotes it.
func (u *user) createRequest(iter int, now time.Time) []byte {
	text := append(u.scratch[:0], u.tok.Username...)
	text = append(text, " says hi at "...)
	text = now.UTC().AppendFormat(text, "2006-01-02T15:04:05.000Z")
	text = append(text, " (VU "...)
	text = strconv.AppendInt(text, int64(u.vu), 10)
	text = append(text, ", iter "...)
	text = strconv.AppendInt(text, int64(iter), 10)
	text = append(text, ')')
	body := append(text, `{"body":`...)
	body = jsonstr.AppendHTMLSafe(body, text)
	body = append(body, '}')
	u.scratch = body
	body = body[len(text):]

	u.startRequest("POST")
	u.req = append(u.req, "/posts"...)
	u.endRequestLine()
	u.req = append(u.req, "Authorization: Bearer "...)
	u.req = append(u.req, u.tok.Token...)
	u.req = append(u.req, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	u.req = strconv.AppendInt(u.req, int64(len(body)), 10)
	u.req = append(u.req, "\r\n\r\n"...)
	u.req = append(u.req, body...)
	return u.req
}

// appendPostIDs appends the ids of the posts in a feed body {"posts":[{"id":N,…},…]}.
// Inside JSON strings a quote is escaped, so `{"id":` only ever starts a post object;
// scanning for it avoids decoding the whole feed.
func appendPostIDs(dst []int64, body []byte) []int64 {
	pat := []byte(`{"id":`)
	for {
		i := bytes.Index(body, pat)
		if i < 0 {
			return dst
		}
		body = body[i+len(pat):]
		j := 0
		var id int64
		overflow := false
		for j < len(body) && body[j] >= '0' && body[j] <= '9' {
			d := int64(body[j] - '0')
			if id > (math.MaxInt64-d)/10 {
				overflow = true
			}
			id = id*10 + d
			j++
		}
		if id > 0 && !overflow {
			dst = append(dst, id)
		}
		body = body[j:]
	}
}
