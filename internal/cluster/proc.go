package cluster

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/onehost/onehost/internal/ipc"
)

// Worker states, as `status` prints them (PM2's words).
const (
	StateLaunching      = "launching"
	StateOnline         = "online"
	StateStopping       = "stopping"
	StateErrored        = "errored"
	StateWaitingRestart = "waiting-restart"
	// StateStopped is a slot whose worker exited under autorestart: false (PM2's stopped).
	StateStopped = "stopped"
)

// proc is one worker process. The fields above the line are set before the process's
// goroutines start and then only read; the rest belong to the supervisor's loop.
type proc struct {
	slot    int
	pid     int
	started time.Time
	conn    *ipc.Conn
	kill    func() // SIGKILL; safe from any goroutine
	log     *zap.Logger

	readyOnce sync.Once
	ready     chan struct{} // closed when the worker said ready
	exited    chan struct{} // closed after Wait returned
	exitErr   error         // set before exited is closed

	// socket is the listening socket a reload's new worker was started on, its own until
	// promotion makes it the slot's (separateGenerations); nil for a worker on the slot's.
	socket *os.File
	notify *notifySocket // its sd_notify socket; nil if none could be made
	node   *nodeChannel  // its Node IPC channel; nil unless the program is Node
	// adopted: the worker of a previous supervisor, taken over at Start (adopt.go): not
	// our child, watched through a pidfd.
	adopted bool
	// rejoins: it said in its greeting (ipc.Msg.Rejoin) that it outlives this supervisor
	// and rejoins the next (loop-owned).
	rejoins bool

	// loop-owned
	retired      *os.File  // the slot's previous socket, closed when this (old) worker exits
	lastWatchdog time.Time // its last sd_notify WATCHDOG=1 (zero: never sent one)
	speaksIPC    bool      // it has sent an ipc message: it is asked for stats and judged by them
	nodeCounters bool      // the Node preload reports its counters (nodestats.go)
	nodeAt       float64   // when the last of them were taken, by the app's clock (ms)
	slotTaken    bool      // the Node preload said the app listens on the slot's socket (fd 3)
	appPorts     []string  // the app ports handed to it, by the address bound (nodelisten.go)
	statusText   string    // its last sd_notify STATUS=
	// says is what its sd_notify said of its own state since its last READY=1: "stopping"
	// (STOPPING=1: it takes no new connections from the steering) or "reloading"
	// (RELOADING=1); "" otherwise.
	says          string
	state         string
	candidate     bool // started by a reload and not yet promoted
	readyAt       time.Time
	lastHeard     time.Time
	stallsAtStart time.Duration // the stall clock's total when it started

	// askedAt is when the oldest stats request not yet answered was sent (zero: none
	// pending). Silence is judged from it, not from lastHeard, so that a worker is never
	// blamed for requests its supervisor did not send.
	askedAt time.Time
	// startClock is what listen_timeout is judged from: started, moved later by the
	// supervisor's own stalls.
	startClock  time.Time
	requests    uint64
	prevReq     uint64
	prevReqAt   time.Time
	rps         float64
	connections int64
	loopConns   []int64 // the worker's connections per event loop (ipc.Msg.LoopConnections)
	cpuTicks    uint64
	cpuAt       time.Time
	cpuPercent  float64
	rss         int64
	drainTimer  *time.Timer
	health      string       // HealthOK, HealthUnhealthy or "" (not reported)
	healthErr   string       // why unhealthy, as the worker said
	role        string       // the worker's part in its app, as it said (ipc.Msg.Role)
	serve       servingWatch // whether it serves its slot, for those without ipc (serving.go)

	// report is what the worker last said of itself (ipc.Msg.Report), passed on unread.
	report json.RawMessage
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; 100 on every
// Linux configuration Go supports.
const clockTicks = 100

// lineLogger re-logs a worker's output line by line with its slot and pid. Lines longer
// than maxLogLine are cut, so a worker that never writes a newline cannot grow the
// supervisor's memory.
type lineLogger struct {
	log   *zap.Logger
	raw   io.Writer  // also gets each line as is, newline-terminated; nil: none
	stamp dateFormat // log_date_format: each line gets "TIME: " in front (but a JSON one logged as an entry); nil: none
	buf   []byte
	pre   []byte // the stamped line
	cut   bool
	// out, when set, takes each line instead of log (Options.Output), with slot, pid and
	// stream.
	out    func(OutputLine)
	slot   int
	pid    int
	stream string
}

// copyLines feeds r to w until EOF (every holder of the pipe's write end closed it), then
// logs a last unterminated line.
func copyLines(r io.ReadCloser, w *lineLogger) {
	defer r.Close()
	io.Copy(w, r)
	w.flush()
}

const maxLogLine = 4 << 10

func (w *lineLogger) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.add(p)
			break
		}
		w.add(p[:i])
		w.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (w *lineLogger) add(p []byte) {
	room := maxLogLine - len(w.buf)
	if len(p) > room {
		p, w.cut = p[:room], true
	}
	w.buf = append(w.buf, p...)
}

func (w *lineLogger) flush() {
	if len(w.buf) > 0 || w.cut {
		line := w.buf
		if w.stamp != nil { // PM2's log_date_format: "TIME: line"
			w.pre = append(append(w.stamp.append(w.pre[:0], time.Now()), ": "...), w.buf...)
			line = w.pre
		}
		if w.out != nil {
			w.out(OutputLine{Slot: w.slot, PID: w.pid, Stream: w.stream, Time: time.Now(), Text: line, Truncated: w.cut})
		} else if w.cut || !w.logJSON(w.buf) {
			// Check first: with the level off, a line costs no allocation.
			if ce := w.log.Check(zap.InfoLevel, "worker output"); ce != nil {
				ce.Write(zap.ByteString("line", line), zap.Bool("truncated", w.cut))
			}
		}
		if w.raw != nil {
			line = append(line, '\n')
			w.raw.Write(line)
		}
	}
	w.buf, w.cut = w.buf[:0], false
}

// logJSON re-logs a worker's structured log line (a JSON object with "msg", as zap, pino,
// bunyan and structlog write them) as an entry of the supervisor's log: the worker's message
// and level, its fields merged in beside the slot and pid, the supervisor's timestamp, so
// that one log has one format instead of JSON escaped inside JSON. It reports false for any
// other line, which is logged as "worker output".
func (w *lineLogger) logJSON(line []byte) bool {
	if len(line) < 2 || line[0] != '{' {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || dec.More() {
		return false
	}
	msg, ok := m["msg"].(string)
	if !ok {
		return false
	}
	lvl := zapcore.InfoLevel
	if l, ok := m["level"].(string); ok {
		if lvl.UnmarshalText([]byte(l)) != nil {
			lvl = zapcore.InfoLevel
		}
	}
	ce := w.log.Check(lvl, msg)
	if ce == nil {
		return true
	}
	// The worker's own time, level and message are the entry's; its pid is the slot's.
	for _, k := range []string{"msg", "level", "ts", "time", "pid"} {
		delete(m, k)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fields := make([]zap.Field, 0, len(keys))
	for _, k := range keys {
		switch v := m[k].(type) {
		case json.Number:
			if i, err := v.Int64(); err == nil {
				fields = append(fields, zap.Int64(k, i))
			} else if f, err := v.Float64(); err == nil {
				fields = append(fields, zap.Float64(k, f))
			} else {
				fields = append(fields, zap.String(k, v.String()))
			}
		default:
			fields = append(fields, zap.Any(k, v))
		}
	}
	ce.Write(fields...)
	return true
}

// The streams of a worker's output, by PM2's names for them (its log types).
const (
	StreamOut = "out"
	StreamErr = "err"
)

// OutputLine is one line of a worker's output (Options.Output).
type OutputLine struct {
	Slot, PID int
	// Stream is StreamOut or StreamErr. An adopted worker's two streams share one pipe
	// (the one it was given at adoption): StreamOut.
	Stream string
	Time   time.Time
	// Text is the line without its newline, log_date_format's "TIME: " in front when the
	// app sets one; cut at 4 KiB (Truncated). Valid only during the call.
	Text      []byte
	Truncated bool
}
