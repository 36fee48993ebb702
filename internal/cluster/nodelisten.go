// A Node app's listen on a port the configuration did not name: bound by the supervisor and
// handed over, as PM2's primary does.

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/ipc"
)

// Under PM2 a cluster worker's listen(8080) asks the primary (Node's cluster module), which
// creates the handle for that address on the first worker's listen and shares it with the
// others. Here the served port's socket is at fd 3 before the app runs; for any other port
// the preload (nodepreload/preload.cjs) asks the supervisor over Node's IPC channel,
// {"onehost":"listen","seq":N,"port":P,"host":H}, and the supervisor answers as Node's own
// handle passing does: {"cmd":"NODE_HANDLE","type":"net.Native","msg":{"cmd":
// "NODE_ONEHOST_LISTEN","seq":N,"addr":A}} with the listening socket attached (SCM_RIGHTS),
// which Node delivers to the preload's 'internalMessage' listener as a TCP handle that
// listen() takes; or {"cmd":"NODE_ONEHOST_LISTEN","seq":N,"error":…,"fix":…} when it cannot.
// (A NODE_ message is Node's internal kind: the app's own process.on('message') never sees
// it.)
//
// Each slot gets its own SO_REUSEPORT socket on the address asked (an app port), as it has
// on the served port, and keeps it as it keeps that one: a restarted worker and a reload's
// new generation get the same socket, and its queue, so a restart or reload loses nothing
// queued; the slot closes it when it closes its own socket (scale-down, errored, stopped,
// Stop), and when the worker that asked for it was replaced by one that does not ask for it
// (a reload with a new PORT). What the served port has and an app port does not: the
// steering (connections are spread by the kernel's hash; round robin and moving a crashed
// worker's queue are the served port's), systemd's file descriptor store and adoption (a
// restarted supervisor binds app ports anew as its workers ask). -listen on the app's port
// gives it all of that; the log says so.
//
// The supervisor binds nothing the worker could not bind itself: the workers run as the
// supervisor's user. An address another process listens on already is refused (naming the
// process), as Start refuses the served one: joining its SO_REUSEPORT group would take a
// share of its connections.

// maxAppPorts bounds the app ports of one slot: each is a socket the supervisor holds.
const maxAppPorts = 16

// appPort is one slot's socket on an app port.
type appPort struct {
	f    *os.File
	addr string // as bound: [::]:8080, 127.0.0.1:8080
}

// appListen is a resolved request of the preload.
type appListen struct {
	seq  int64
	port int
	host string // as the app asked ("" none)
	bind string // what to bind: ":8080" (every interface, as Node's listen(8080)), "127.0.0.1:8080"
	err  error  // the host did not resolve
}

// resolveListen turns the preload's request into the address to bind, resolving a host
// name as Node's listen does (its first address); off the loop (DNS may wait).
func resolveListen(m nodeMsg) appListen {
	r := appListen{seq: m.Seq, port: m.Port, host: m.Host}
	if m.Port <= 0 || m.Port > 65535 {
		r.err = fmt.Errorf("port %d is not a TCP port", m.Port)
		return r
	}
	port := strconv.Itoa(m.Port)
	switch h := strings.Trim(m.Host, "[]"); {
	case h == "":
		r.bind = ":" + port
	case strings.EqualFold(h, "localhost"):
		r.bind = net.JoinHostPort("127.0.0.1", port)
	default:
		if a, err := netip.ParseAddr(h); err == nil {
			r.bind = net.JoinHostPort(a.Unmap().String(), port)
			return r
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
		if err != nil || len(ips) == 0 {
			r.err = fmt.Errorf("host %q does not resolve: %v", h, err)
			return r
		}
		r.bind = net.JoinHostPort(ips[0].Unmap().String(), port)
	}
	return r
}

// nodeListen answers a preload's request for an app port (loop only): the slot's socket
// on that address, bound now if the slot has none, or why not.
func (s *Supervisor) nodeListen(p *proc, r appListen) {
	if _, live := s.procs[p]; !live || p.node == nil {
		return
	}
	sl := s.slots[p.slot]
	ap, why, fix := s.appPortFor(sl, r)
	if ap == nil {
		p.log.Error("the app's listen cannot be served", zap.Int("port", r.port), zap.String("host", r.host),
			zap.String("why", why), zap.String("fix", fix))
		go p.node.sendJSON(map[string]any{"cmd": nodeListenCmd, "seq": r.seq, "error": why, "fix": fix})
		return
	}
	if !slices.Contains(p.appPorts, r.bind) {
		p.appPorts = append(p.appPorts, r.bind)
	}
	dup, err := ipc.SocketFile(ap.f, "app-port")
	if err != nil {
		go p.node.sendJSON(map[string]any{"cmd": nodeListenCmd, "seq": r.seq, "error": err.Error(), "fix": "see the supervisor's log"})
		return
	}
	p.log.Info("the app's listen is served on a port of its own: the slot's socket there handed over",
		zap.String("addr", ap.addr), zap.Int("asked", r.port))
	msg := map[string]any{"cmd": "NODE_HANDLE", "type": "net.Native",
		"msg": map[string]any{"cmd": nodeListenCmd, "seq": r.seq, "addr": ap.addr}}
	go func() {
		defer dup.Close()
		if err := p.node.sendFile(msg, dup); err != nil {
			p.log.Warn("hand the app port's socket over", zap.String("addr", ap.addr), zap.Error(err))
		}
	}()
}

// nodeListenCmd is the preload's message name in Node's internal namespace.
const nodeListenCmd = "NODE_ONEHOST_LISTEN"

// appPortFor returns the slot's socket for r, binding it if the slot has none (loop only);
// otherwise why not and what to do.
func (s *Supervisor) appPortFor(sl *slot, r appListen) (ap *appPort, why, fix string) {
	served := s.servedFix()
	if r.err != nil {
		return nil, r.err.Error(), "listen on an address of this host, or on none (every interface), " + served
	}
	if sl == nil {
		return nil, "the worker's slot is gone (scaled down)", "none needed: the worker is stopping"
	}
	if ap := sl.ports[r.bind]; ap != nil {
		return ap, "", ""
	}
	if len(sl.ports) >= maxAppPorts {
		return nil, fmt.Sprintf("the app asks for more than %d ports", maxAppPorts), "listen on fewer, " + served
	}
	if !s.holdsAppPort(r.bind) {
		if who, stop := s.portTaken(r.bind, r.port); who != "" {
			return nil, r.what() + " is in use by " + who, stop + ", " + served
		}
	}
	f, addr, err := listen(r.bind)
	if err != nil {
		return nil, bindWhy(err, r), bindFix(err, served)
	}
	if sl.ports == nil {
		sl.ports = map[string]*appPort{}
	}
	ap = &appPort{f: f, addr: addr}
	sl.ports[r.bind] = ap
	s.publishAppPorts()
	s.log.Info("bound a port the app's listen asked for", zap.Int("slot", sl.id), zap.String("addr", addr))
	return ap, "", ""
}

// servedFix is the other way out, in a fix after the first: the app's listen on
// process.env.PORT, and the served port chosen with -listen.
func (s *Supervisor) servedFix() string {
	return "or have the app listen on process.env.PORT, the port the supervisor serves (" + s.addr +
		" now: choose it with -listen HOST:PORT, or env.PORT in ecosystem.config.js)"
}

// holdsAppPort reports whether some slot of the cluster has a socket on bind already
// (loop only): then another slot's joins its SO_REUSEPORT group, as the slots' sockets on
// the served port do.
func (s *Supervisor) holdsAppPort(bind string) bool {
	for _, sl := range s.slots {
		if sl.ports[bind] != nil {
			return true
		}
	}
	return false
}

// portTaken names the process that listens on bind already ("" when it is free), and how
// to stop it: a plain bind (no SO_REUSEPORT) fails where anyone listens on the address.
func (s *Supervisor) portTaken(bind string, port int) (who, stop string) {
	ln, err := net.Listen("tcp", bind)
	if err == nil {
		ln.Close()
		return "", ""
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return "", "" // not a holder: the bind says what is wrong
	}
	owners, _ := PortOwners(port)
	if len(owners) > 0 && owners[0].PID == os.Getpid() {
		return "this supervisor (another of its apps)", "give one of the apps another port"
	}
	return portAdvice(owners)
}

// what is the address asked, in the user's words: "port 8080" (every interface), or
// "127.0.0.1:8080".
func (r appListen) what() string {
	if strings.HasPrefix(r.bind, ":") {
		return "port " + strconv.Itoa(r.port)
	}
	return r.bind
}

// bindWhy and bindFix say why a bind failed, and what to do, in the user's terms.
func bindWhy(err error, r appListen) string {
	switch {
	case errors.Is(err, syscall.EACCES):
		return fmt.Sprintf("port %d is below 1024, and binding it needs root or CAP_NET_BIND_SERVICE (the supervisor runs as uid %d)", r.port, os.Geteuid())
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Sprintf("%s is not an address of this host", r.host)
	case errors.Is(err, syscall.EADDRINUSE):
		return r.what() + " is in use by another process"
	}
	return err.Error()
}

func bindFix(err error, served string) string {
	switch {
	case errors.Is(err, syscall.EACCES):
		return "give the supervisor the capability (systemd: AmbientCapabilities=CAP_NET_BIND_SERVICE), " + served
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "listen on an address of this host, or on none (every interface), " + served
	}
	return "free the port, " + served
}

// appPortsAfter closes the app ports that p, a worker replaced by a reload or a restart
// (not a crash: its slot's next worker asks again), was the last live worker of its slot to
// use (loop only, at its exit): a new generation that listens elsewhere (a new PORT) leaves
// no socket behind that nobody accepts on.
func (s *Supervisor) appPortsAfter(p *proc) {
	sl := s.slots[p.slot]
	if sl == nil || len(p.appPorts) == 0 || s.stopping {
		return
	}
	closed := false
	for _, bind := range p.appPorts {
		ap := sl.ports[bind]
		if ap == nil || s.slotUses(p, bind) {
			continue
		}
		p.log.Info("app port closed: the slot's new worker does not listen on it", zap.String("addr", ap.addr))
		ap.f.Close()
		delete(sl.ports, bind)
		closed = true
	}
	if closed {
		s.publishAppPorts()
	}
}

// slotUses reports whether a live worker of p's slot other than p was handed its socket on
// bind (loop only).
func (s *Supervisor) slotUses(p *proc, bind string) bool {
	for q := range s.procs {
		if q != p && q.slot == p.slot && slices.Contains(q.appPorts, bind) {
			return true
		}
	}
	return false
}

// closeAppPorts closes every app port of the slot (loop only: with the slot's own socket).
func (s *Supervisor) closeAppPorts(sl *slot) {
	if len(sl.ports) == 0 {
		return
	}
	for bind, ap := range sl.ports {
		ap.f.Close()
		delete(sl.ports, bind)
	}
	s.publishAppPorts()
}

// publishAppPorts makes the addresses of every slot's app ports what AppPorts returns
// (loop only).
func (s *Supervisor) publishAppPorts() {
	var addrs []string
	for _, sl := range s.slots {
		for _, ap := range sl.ports {
			if !slices.Contains(addrs, ap.addr) {
				addrs = append(addrs, ap.addr)
			}
		}
	}
	slices.Sort(addrs)
	s.appPorts.Store(&addrs)
}

// AppPorts returns the addresses the supervisor serves because the app's own listen asked
// for them (a Node app's listen(8080) where the configuration names another port), sorted;
// none for most apps. Safe from any goroutine.
func (s *Supervisor) AppPorts() []string {
	if p := s.appPorts.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// appServing records that p's app listens on an app port (loop only): online then, as at
// the served port's 'listening', and, the first time a worker listens on an app port
// before (or without) the served one, the log says what that costs and how to serve that
// port alone.
func (s *Supervisor) appServing(p *proc, addr string) {
	s.listening(p)
	if p.slotTaken || s.appPortSaid {
		return
	}
	s.appPortSaid = true
	_, port, _ := net.SplitHostPort(addr)
	p.log.Warn("the app listens on "+addr+", a port of its own: the supervisor serves it there as its listen asked; "+s.addr+
		" (the port the supervisor was given) stays bound, and the app has not listened on it (so far): connections there wait, unaccepted. "+
		"To serve the app's port alone, with round-robin steering and its queue kept across a supervisor restart, give it to the supervisor: "+
		"-listen 0.0.0.0:"+port+" (ecosystem.config.js: env.PORT: "+port+"; YAML: listen)",
		zap.String("addr", addr), zap.String("configured", s.addr))
}

// sendJSON writes one message to the Node program (see send).
func (c *nodeChannel) sendJSON(v any) error {
	b, err := jsonLine(v)
	if err != nil {
		return err
	}
	return c.write(b)
}

// jsonLine is v in Node's "json" serialization: one JSON value and a newline.
func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode node message: %w", err)
	}
	return append(b, '\n'), nil
}

// sendFile writes one message with f attached (SCM_RIGHTS), as Node's handle passing does:
// the descriptor arrives with the message's first byte, and Node pairs it with the
// NODE_HANDLE message of that read. Both files are held (their SyscallConn) while it is
// sent, so that a Close elsewhere (the worker's exit) waits rather than frees the number.
func (c *nodeChannel) sendFile(v any, f *os.File) error {
	b, err := jsonLine(v)
	if err != nil {
		return err
	}
	fc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("send socket: %w", err)
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("send socket: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	var serr, werr error
	if err := fc.Control(func(sock uintptr) {
		werr = rc.Write(func(ch uintptr) bool {
			n, serr = unix.SendmsgN(int(ch), b, unix.UnixRights(int(sock)), nil, unix.MSG_NOSIGNAL)
			return true
		})
	}); err != nil {
		return fmt.Errorf("send socket: %w", err)
	}
	if err := errors.Join(werr, serr); err != nil {
		return fmt.Errorf("send socket: %w", err)
	}
	if n < len(b) { // a stream socket may take part of it; the descriptor went with the first
		_, err = c.f.Write(b[n:])
	}
	return err
}
