package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A worker may say it is ready in any of the ways programs already do, and the supervisor
// listens on all of them:
//   - our ipc channel ("ready", internal/ipc), at ONEHOST_IPC_FD;
//   - systemd's notify protocol: READY=1 in a datagram to the socket NOTIFY_SOCKET names,
//     one socket per worker (gunicorn, Puma, Caddy, anything built on sd_notify);
//   - Node's IPC channel, for Node programs only: process.send('ready') arrives as the JSON
//     line "ready" on the fd NODE_CHANNEL_FD names (what PM2's wait_ready listens for).
//
// Readiness sources, for the log.
const (
	readyIPC     = "ipc"
	readyNotify  = "sd_notify"
	readyNode    = "node ipc"
	readyStart   = "start"     // wait_ready false and the program not known to signal
	readyListen  = "listening" // wait_ready false, a Node app's listen under the preload
	readyLate    = "deadline"  // wait_ready true, nothing said within listen_timeout
	readyAdopted = "adopted"   // a previous supervisor's worker, serving all along (adopt.go)
)

// notifySocket is the datagram socket a worker sends sd_notify messages to.
type notifySocket struct {
	conn *net.UnixConn
	path string
}

// openNotify creates the worker's notify socket in dir.
func openNotify(dir string, slot int, seq uint64) (*notifySocket, error) {
	path := filepath.Join(dir, fmt.Sprintf("w%d-%d", slot, seq))
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("create notify socket: %w", err)
	}
	return &notifySocket{conn: c, path: path}, nil
}

func (n *notifySocket) Close() {
	n.conn.Close()
	os.Remove(n.path)
}

// notifyMsg is what one sd_notify datagram said that the supervisor acts on.
type notifyMsg struct {
	ready, stopping, reloading, watchdog bool
	status                               string
	hasStatus                            bool
	extend                               time.Duration // EXTEND_TIMEOUT_USEC
	mainPID                              int
}

// parseNotify reads one sd_notify datagram: newline-separated VARIABLE=VALUE assignments;
// unknown variables and malformed lines are ignored, as systemd does.
func parseNotify(b []byte) notifyMsg {
	var m notifyMsg
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := strings.Cut(string(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "READY":
			m.ready = v == "1"
		case "STOPPING":
			m.stopping = v == "1"
		case "RELOADING":
			m.reloading = v == "1"
		case "WATCHDOG":
			m.watchdog = v == "1"
		case "STATUS":
			m.status, m.hasStatus = v, true
		case "EXTEND_TIMEOUT_USEC":
			if us, err := strconv.ParseUint(v, 10, 63); err == nil {
				m.extend = time.Duration(us) * time.Microsecond
			}
		case "MAINPID":
			m.mainPID, _ = strconv.Atoi(v)
		}
	}
	return m
}

// readNotify forwards a worker's sd_notify messages to the loop until its socket closes.
func (s *Supervisor) readNotify(p *proc, n *notifySocket) {
	b := make([]byte, 4096)
	for {
		k, err := n.conn.Read(b)
		if err != nil {
			return
		}
		m := parseNotify(b[:k])
		s.post(func() { s.notified(p, m) })
	}
}

// notified acts on an sd_notify message (loop only).
func (s *Supervisor) notified(p *proc, m notifyMsg) {
	now := time.Now()
	if m.ready {
		s.becameReady(p, readyNotify)
		p.says = "" // READY=1 ends a reload (systemd's rule), and whatever was said before
	}
	if m.watchdog {
		p.lastHeard, p.lastWatchdog = now, now
	}
	if m.hasStatus && m.status != p.statusText {
		p.statusText = m.status
		p.log.Info("worker status", zap.String("status", m.status))
	}
	if m.extend > 0 && p.state == StateLaunching {
		// The program asks for more time to start: the deadline is now + extend at the
		// earliest, as systemd's EXTEND_TIMEOUT_USEC.
		if at := now.Add(m.extend).Add(-s.cfg.ListenTimeout.D()); at.After(p.startClock) {
			p.startClock = at
		}
	}
	// A program stopping of its own accord (systemd's STOPPING=1) gets no new connections
	// from the steering program from now on (updateSteering), as systemd stops sending a
	// stopping service its sockets' connections; its exit is then a crash like any other.
	// RELOADING=1 is shown in status until the READY=1 that ends it.
	if m.stopping && p.says != "stopping" {
		p.says = "stopping"
		p.log.Info("worker says it is stopping: no new connections are steered to it")
	}
	if m.reloading && !m.ready && p.says == "" {
		p.says = "reloading"
		p.log.Info("worker says it is reloading")
	}
	if m.mainPID != 0 && m.mainPID != p.pid {
		p.log.Warn("worker sent MAINPID: ignored, the supervisor watches the process it started", zap.Int("mainpid", m.mainPID))
	}
}

// becameReady records a readiness signal (loop only): the worker is online, and the
// program is known to signal, so its later generations are waited for strictly.
func (s *Supervisor) becameReady(p *proc, how string) {
	if how != readyStart && how != readyLate && how != readyListen {
		s.signals = true
	}
	// Ready is published here, on the loop, after the state: a reload or restart that waits
	// for it reads Status next and must see the worker online (closed by the reader
	// goroutines before the loop had marked it, a restart could end with it "launching").
	defer p.readyOnce.Do(func() { close(p.ready) })
	if p.state != StateLaunching {
		return
	}
	now := time.Now()
	p.state, p.readyAt, p.prevReqAt = StateOnline, now, now
	p.log.Info("worker online", zap.Duration("start", now.Sub(p.started)), zap.String("ready", how))
	s.tellHostDrain(p, how == readyAdopted)
}

// isNode reports whether a program is Node (node, nodejs, or a script that Node runs: .js,
// .cjs, .mjs with its #! line), which alone gets a Node IPC channel and the preload: set
// for another program, NODE_CHANNEL_FD leaks into its children and breaks the Node
// programs they start.
func isNode(program string) bool {
	b := filepath.Base(program)
	switch filepath.Ext(b) {
	case ".js", ".cjs", ".mjs":
		return true
	}
	return b == "node" || b == "nodejs"
}

// nodeChannel is the supervisor's end of a Node program's IPC channel (a unix stream
// socketpair; Node's "json" serialization: one JSON value per line).
type nodeChannel struct {
	f  *os.File   // ours
	mu sync.Mutex // one message at a time: the loop's goroutines send concurrently
}

// newNodeChannel returns our end and the child's.
func newNodeChannel() (*nodeChannel, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create node ipc channel: %w", err)
	}
	return &nodeChannel{f: os.NewFile(uintptr(fds[0]), "node-ipc")}, os.NewFile(uintptr(fds[1]), "node-ipc-child"), nil
}

// send writes one message (a JSON value) to the Node program: process.on('message') gets it.
func (c *nodeChannel) send(jsonValue string) error {
	return c.write([]byte(jsonValue + "\n"))
}

// write writes one whole message.
func (c *nodeChannel) write(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.f.Write(b)
	return err
}

// listening is p's app listening (its served port or an app port: loop only): the worker
// is online then, as in PM2's cluster mode, unless it is to say ready itself.
func (s *Supervisor) listening(p *proc) {
	if !s.cfg.waitReady() && !s.signals && p.state == StateLaunching {
		s.becameReady(p, readyListen)
	}
}

// readNode forwards "ready" from a Node program's process.send to the loop until the
// channel closes, and the preload's messages (nodestats.go). Other messages (Node's own,
// the program's) are ignored.
func (s *Supervisor) readNode(p *proc, c *nodeChannel) {
	sc := bufio.NewScanner(c.f)
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		switch msg := bytes.TrimSpace(sc.Bytes()); {
		case bytes.Equal(msg, []byte(`"ready"`)):
			s.post(func() { s.becameReady(p, readyNode) })
		case bytes.Equal(msg, []byte(`"onehost:listening"`)):
			// The preload's word that the app's server listens on fd 3: online then, as
			// PM2's cluster mode, unless the worker is to say ready itself.
			s.post(func() {
				p.slotTaken = true
				s.listening(p)
			})
		default:
			m, ok := parseNodeMsg(msg)
			switch {
			case ok && m.Onehost == "listen":
				r := resolveListen(m) // here: a host name may take a DNS lookup
				s.post(func() { s.nodeListen(p, r) })
			case ok:
				s.post(func() { s.nodeMessage(p, m) })
			}
		}
	}
}

// parseSignal reads a signal name as PM2 and systemd write it: SIGTERM, TERM, sigint.
func parseSignal(name string) (syscall.Signal, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	n = strings.TrimPrefix(n, "SIG")
	if sig := unix.SignalNum("SIG" + n); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("%q is not a signal name", name)
}
