// The servers a sweep measures: starting one (pinned, on a copy of the seed), its
// readiness, its status and its end.

package ceiling

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/control"
	"go.uber.org/zap"
)

// Server is one running server: the supervisor with its workers, one worker, or a peer
// (PM2 with its workers, nginx with its workers).
type Server struct {
	Mode string
	N    int
	Addr string
	Argv []string // the command as started (after pinning), with its environment prefix
	CPUs []int

	pid     int   // the root process: the generator's --server-pid
	roots   []int // the trees whose CPU is the server's; nil: pid's
	stop    func() error
	cmd     *exec.Cmd
	socket  string
	db      string
	logPath string
	exited  chan struct{}
	waitErr error
}

// StartServer copies the seed and starts a server of mode with n workers (or
// GOMAXPROCS=n), pinned to its cores, and waits until it serves.
func (s *Sweeper) StartServer(ctx context.Context, mode string, n int) (*Server, error) {
	s.serverSeq++
	dir := filepath.Join(s.cfg.WorkDir, fmt.Sprintf("server-%d-%s-%d", s.serverSeq, mode, n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	srv := &Server{Mode: mode, N: n, CPUs: s.serverCPUs(n), db: filepath.Join(dir, "feed.db"),
		socket: filepath.Join(dir, "sup.sock"), logPath: filepath.Join(dir, "server.log"),
		exited: make(chan struct{})}
	switch mode {
	case ModePM2:
		return s.startPM2(ctx, srv, dir)
	case ModeNginx, ModeNginxGzip:
		return s.startNginx(ctx, srv, dir)
	case ModePM2Compress:
		return s.startPM2Compress(ctx, srv, dir)
	}
	var env, argv []string
	if s.appMode() {
		var err error
		if argv, err = s.appClusterArgv(dir, srv); err != nil {
			return nil, err
		}
	} else if err := CopyFile(s.cfg.SeedDB, srv.db); err != nil {
		return nil, fmt.Errorf("start server: copy seed: %w", err)
	} else {
		env = []string{"SQLITE_PATH=" + srv.db, "JWT_SECRET=" + s.cfg.JWTSecret}
		if s.cfg.Compress != "" {
			env = append(env, "COMPRESS="+s.cfg.Compress, "COMPRESS_ROUTES=heavy,products")
		}
	}
	switch {
	case s.appMode():
	case mode == ModeCluster:
		env = append(env, "LOG_LEVEL=warn")
		argv = []string{s.cfg.Supervisor, "run", "-config", s.cfg.ClusterConfig, "-instances", strconv.Itoa(n),
			"-listen", net.JoinHostPort(s.cfg.ListenHost, strconv.Itoa(s.cfg.ListenPort)), "-socket", srv.socket, "-log-level", "warn"}
		if s.cfg.Agent != "" {
			argv = append(argv, "-agent", s.cfg.Agent)
		}
	default:
		// info: the worker's "serving" line says which port it bound.
		env = append(env, "LOG_LEVEL=info", "HOST="+s.cfg.ListenHost, "PORT=0", "GOMAXPROCS="+strconv.Itoa(n*max(1, s.cfg.SingleProcs)))
		argv = []string{s.cfg.Worker}
	}
	if srv.CPUs != nil {
		argv = s.cfg.Pin(srv.CPUs, argv)
	}
	if s.cfg.Wrap != nil {
		argv = s.cfg.Wrap(argv)
	}
	if err := s.spawn(srv, "server", "", argv, env); err != nil {
		return nil, err
	}
	s.log.Info("server started", zap.String("mode", mode), zap.Int("n", n), zap.Int("pid", srv.pid))

	ready := func() bool {
		if mode == ModeCluster {
			if st, err := srv.status(ctx); err == nil && st.Addr != "" && online(st) == n {
				srv.Addr = st.Addr
			}
		} else {
			srv.Addr = servingAddr(srv.logPath)
		}
		return srv.Addr != ""
	}
	if err := srv.waitReady(ctx, "server", "not serving", ready); err != nil {
		return nil, err
	}
	return srv, nil
}

// spawn starts argv (in dir; "" the sweep's) with env added to the sweep's environment,
// its output in the server's log, killed if the sweep dies (Pdeathsig: the servers die
// with the sweep even if it is killed), and reaped by a goroutine that closes srv.exited.
// what names the server in errors.
func (s *Sweeper) spawn(srv *Server, what, dir string, argv, env []string) error {
	srv.Argv = append(append([]string(nil), env...), argv...)
	logf, err := os.Create(srv.logPath)
	if err != nil {
		return fmt.Errorf("start %s: %w", what, err)
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), s.cfg.Environ...), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s %s: %w", what, argv[0], err)
	}
	srv.cmd, srv.pid = cmd, cmd.Process.Pid
	go func() { srv.waitErr = cmd.Wait(); close(srv.exited) }()
	return nil
}

// waitReady polls ready every 100 ms for up to 60 s. When the server exits first, the
// context ends or the time runs out, it stops the server and says why, with the tail of
// the server's log; notReady says what was still missing at the deadline.
func (srv *Server) waitReady(ctx context.Context, what, notReady string, ready func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !ready() {
		select {
		case <-srv.exited:
			srv.Stop()
			b, _ := os.ReadFile(srv.logPath)
			return fmt.Errorf("start %s: %s exited (%v): %s", what, srv.cmd.Args[0], srv.waitErr, Tail(plain(b), 600))
		case <-ctx.Done():
			srv.Stop()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			srv.Stop()
			b, _ := os.ReadFile(srv.logPath)
			return fmt.Errorf("start %s: %s after 60 s: %s", what, notReady, Tail(plain(b), 600))
		}
	}
	return nil
}

// PID is the server's root process (the supervisor, the worker, PM2's God daemon, or
// nginx's master).
func (srv *Server) PID() int { return srv.pid }

// sampled are the roots of the process trees whose CPU the server's is.
func (srv *Server) sampled() []int {
	if len(srv.roots) > 0 {
		return srv.roots
	}
	return []int{srv.pid}
}

// Stop stops the server gracefully (SIGTERM; a peer its own way), killing it after 10 s,
// and removes its database copy.
func (srv *Server) Stop() error {
	if srv.stop != nil {
		return srv.stop()
	}
	if srv.cmd == nil {
		return nil
	}
	select {
	case <-srv.exited:
	default:
		srv.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-srv.exited:
		case <-time.After(10 * time.Second):
			srv.cmd.Process.Kill()
			<-srv.exited
		}
	}
	for _, suf := range []string{"", "-wal", "-shm"} {
		os.Remove(srv.db + suf)
	}
	var ee *exec.ExitError
	if srv.waitErr != nil && !errors.As(srv.waitErr, &ee) {
		return fmt.Errorf("stop server: %w", srv.waitErr)
	}
	return nil
}

// online counts st's online workers.
func online(st control.Status) int {
	n := 0
	for _, w := range st.Workers {
		if w.Status == "online" {
			n++
		}
	}
	return n
}

// status asks a cluster server's supervisor for its status over its control socket.
func (srv *Server) status(ctx context.Context) (control.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := control.NewClient(srv.socket).Status(ctx, "")
	if err != nil {
		return st, fmt.Errorf("supervisor status: %w", err)
	}
	return st, nil
}

// servingAddr finds the worker's `"msg":"serving"` log line and returns its addr.
func servingAddr(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "serving" && l.Addr != "" {
			return l.Addr
		}
	}
	return ""
}

// Tail is the last n bytes of b, trimmed: the end of a process's output for an error.
func Tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// CopyFile copies the database src to dst, removing dst's -wal and -shm first: a fresh copy
// of the seed for a server.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	for _, suf := range []string{"-wal", "-shm"} {
		os.Remove(dst + suf)
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
