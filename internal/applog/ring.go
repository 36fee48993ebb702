package applog

import (
	"bytes"
	"context"
	"sync"
	"time"

	"go.uber.org/zap/zapcore"
)

// Ring keeps the supervisor's last log lines (its own and its workers', encoded as they
// were written) for `supervisor logs`, which therefore works whatever the log goes to:
// stderr, -log-file, -log-dir. Each line remembers its app and slot (-1: the supervisor's
// own, or the app's).
type Ring struct {
	mu    sync.Mutex
	lines []Line // a circle of cap lines
	next  int    // where the next line goes
	full  bool
	seq   uint64        // lines ever added
	wake  chan struct{} // closed and replaced on every add: followers wait on it
	limit int
}

// Line is one line of the ring: an event of the supervisor's, or a line an app wrote.
type Line struct {
	App  string
	Slot int
	seq  uint64
	Text []byte // an event: the encoded entry (newline-terminated); an app's line: as written
	// An app's line (print.go): its stream (cluster.StreamOut or StreamErr; "" for an
	// event of the supervisor's), what its prefix shows as APP, and when it was written.
	Stream string
	Label  string
	Time   time.Time
}

// Filter selects lines: of one app ("" every app), of one slot (-2 every slot and the
// supervisor's own lines), the apps' lines only (appOnly: --raw, --json), of one stream
// only (cluster.StreamOut or StreamErr: --out, --err; "" both, and the events).
type Filter struct {
	App     string
	Slot    int
	AppOnly bool
	Stream  string
}

// AllSlots is Filter.Slot for every slot and the supervisor's own lines.
const AllSlots = -2

// Match reports whether f selects l.
func (f Filter) Match(l Line) bool {
	return (f.App == "" || l.App == f.App) && (f.Slot == AllSlots || l.Slot == f.Slot) &&
		(!f.AppOnly || l.Stream != "") && (f.Stream == "" || l.Stream == f.Stream)
}

// NewRing keeps the last limit lines.
func NewRing(limit int) *Ring {
	return &Ring{lines: make([]Line, limit), limit: limit, wake: make(chan struct{})}
}

// Add keeps an event of the supervisor's (text: the encoded entry) for app and slot.
func (r *Ring) Add(app string, slot int, text []byte) {
	r.AddLine(Line{App: app, Label: app, Slot: slot, Time: time.Now(), Text: text})
}

// AddLine keeps a copy of l (its text copied).
func (r *Ring) AddLine(l Line) {
	l.Text = bytes.Clone(l.Text)
	r.mu.Lock()
	r.seq++
	l.seq = r.seq
	r.lines[r.next] = l
	r.next = (r.next + 1) % r.limit
	r.full = r.full || r.next == 0
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// Since returns the lines after seq (all kept ones for 0) that sel selects, the last n of
// them at most (n <= 0: all), and the newest seq and a channel closed at the next add.
func (r *Ring) Since(seq uint64, sel Filter, n int) ([]Line, uint64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Line
	count := r.next
	start := 0
	if r.full {
		count, start = r.limit, r.next
	}
	for i := range count {
		l := r.lines[(start+i)%r.limit]
		if l.seq > seq && sel.Match(l) {
			out = append(out, l)
		}
	}
	if n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out, r.seq, r.wake
}

// Follow gives emit the last n lines sel selects, then every new one until ctx ends.
func (r *Ring) Follow(ctx context.Context, emit func(Line), flush func(), sel Filter, n int, keep bool) {
	lines, seq, wake := r.Since(0, sel, n)
	for {
		for _, l := range lines {
			emit(l)
		}
		flush()
		if !keep {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		lines, seq, wake = r.Since(seq, sel, 0)
	}
}

// ringCore is a zapcore.Core that encodes entries into a Ring, with the app and slot
// taken from the "app" and "slot" fields.
type ringCore struct {
	zapcore.LevelEnabler
	enc  zapcore.Encoder
	ring *Ring
	app  string
	slot int
}

// NewCore is a zapcore.Core that encodes entries into ring.
func NewCore(enc zapcore.Encoder, level zapcore.LevelEnabler, ring *Ring) zapcore.Core {
	return &ringCore{LevelEnabler: level, enc: enc, ring: ring, slot: -1}
}

func (c *ringCore) With(fields []zapcore.Field) zapcore.Core {
	clone := &ringCore{LevelEnabler: c.LevelEnabler, enc: c.enc.Clone(), ring: c.ring, app: appOf(fields, c.app), slot: slotOf(fields, c.slot)}
	for _, f := range fields {
		f.AddTo(clone.enc)
	}
	return clone
}

func (c *ringCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *ringCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	buf, err := c.enc.EncodeEntry(e, fields)
	if err != nil {
		return err
	}
	c.ring.Add(appOf(fields, c.app), slotOf(fields, c.slot), buf.Bytes())
	buf.Free()
	return nil
}

func (c *ringCore) Sync() error { return nil }

// slotOf finds an integer "slot" field, else keeps def.
func slotOf(fields []zapcore.Field, def int) int {
	for _, f := range fields {
		if f.Key == "slot" && f.Type == zapcore.Int64Type {
			return int(f.Integer)
		}
	}
	return def
}

// appOf finds a string "app" field, else keeps def.
func appOf(fields []zapcore.Field, def string) string {
	for _, f := range fields {
		if f.Key == "app" && f.Type == zapcore.StringType {
			return f.String
		}
	}
	return def
}
