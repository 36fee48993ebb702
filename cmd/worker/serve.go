package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/onehost/onehost/internal/feed"
	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/steering"
	"github.com/onehost/onehost/internal/writepath"
)

// runServe runs one worker in named steps: parse the config, start logging and watch the
// signals, open the store and the routes, listen, join the supervisor, serve, wait for the
// reason to stop, and drain.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseServe(args, getenv, stderr)
	if err != nil {
		return err
	}
	base, err := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return err
	}
	defer base.Sync()
	log := base.With(zap.Int("worker", cfg.workerID), zap.Int("pid", os.Getpid()))
	if cfg.check {
		return checkServe(cfg, log, stdout)
	}

	// Signals are watched from the start, so a TERM during start-up is a clean stop.
	sigs := watchSignals(cfg)
	defer signal.Stop(sigs)

	raiseFileLimit(log)

	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	stopProfiles, err := startWaitProfiles(cfg.blockProfile, cfg.mutexProfile, cfg.trace, log)
	if err != nil {
		return err
	}
	defer stopProfiles()

	store, handler, closeWorkloads, err := openHandler(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeWorkloads() // the workloads, the store (Close again is a no-op) and a fleet's log

	ln, err := listenChecked(cfg, log)
	if err != nil {
		return err
	}
	srv := &http1.Server{
		Handler:   handler,
		Logger:    log,
		IdleGrace: cfg.idleGrace,
		Transport: cfg.transport,
		Loops:     cfg.loops,
		MaxConns:  cfg.maxConns,
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopReason := make(chan string, 3)

	var sup *ipc.Conn
	if cfg.ipcFD >= 0 {
		sup, err = ipc.FromFile(os.NewFile(uintptr(cfg.ipcFD), "ipc"))
		if err != nil {
			ln.Close()
			return err
		}
		defer sup.Close()
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("serving", zap.String("addr", ln.Addr().String()), zap.Bool("inherited", cfg.inherited),
		zap.String("transport", cfg.transport),
		zap.String("db", cfg.db), zap.String("synchronous", cfg.store.Synchronous))

	ipcDone := make(chan struct{})
	if sup != nil {
		w := supervised{cfg: cfg, srv: srv, store: store, ln: ln, log: log}
		w.greet(sup)
		probe := startHealthProbe(ctx, store.Ping, log) // stops with ctx, waited for below
		go func() {
			defer close(ipcDone)
			defer probe.wait()
			if err := w.serveSupervisor(ctx, sup, probe); ctx.Err() == nil {
				stopReason <- err.Error()
			}
		}()
	} else {
		close(ipcDone)
	}

	reason, err := waitForStop(ctx, sigs, stopReason, serveErr)
	if err != nil {
		return err
	}
	drain(cfg, srv, store, log, reason, sigs, serveErr, cancel, ipcDone)
	return nil
}

// watchSignals starts watching TERM and INT. A worker that may outlive its supervisor also
// ignores SIGPIPE: its output pipe may go with the supervisor, and a log line written there
// must fail, not kill the worker (Go's default for SIGPIPE on fds 1 and 2).
func watchSignals(cfg serveConfig) chan os.Signal {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if cfg.adopt != "" {
		signal.Ignore(syscall.SIGPIPE)
	}
	return sigs
}

// startCPUProfile profiles the whole run into the file at path; stop ends the profile and
// closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// startWaitProfiles turns on the block and mutex profiles asked for; stop writes each to its
// file. They answer what a CPU profile cannot: where a process with idle cores waits. The
// files are created first, so a bad path fails the start rather than the exit.
func startWaitProfiles(blockPath, mutexPath, tracePath string, log *zap.Logger) (stop func(), err error) {
	type profile struct {
		name string
		f    *os.File
	}
	var open []profile
	for _, p := range []struct{ name, path string }{{"block", blockPath}, {"mutex", mutexPath}, {"trace", tracePath}} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err != nil {
			for _, o := range open {
				o.f.Close()
			}
			return nil, fmt.Errorf("create %s profile: %w", p.name, err)
		}
		open = append(open, profile{p.name, f})
	}
	if blockPath != "" {
		runtime.SetBlockProfileRate(1) // every blocking event: the question is where the time goes
	}
	if mutexPath != "" {
		runtime.SetMutexProfileFraction(1)
	}
	for _, o := range open {
		if o.name == "trace" {
			if err := trace.Start(o.f); err != nil {
				for _, o := range open {
					o.f.Close()
				}
				return nil, fmt.Errorf("start trace: %w", err)
			}
		}
	}
	return func() {
		for _, o := range open {
			if o.name == "trace" {
				trace.Stop()
				o.f.Close()
				continue
			}
			if err := pprof.Lookup(o.name).WriteTo(o.f, 0); err != nil {
				log.Warn("write profile", zap.String("profile", o.name), zap.Error(err))
			}
			o.f.Close()
		}
	}, nil
}

// openHandler opens the feed store and the routes served on it (routes.go). On an error
// nothing stays open; otherwise the caller closes the workloads, then the store.
func openHandler(ctx context.Context, cfg serveConfig, log *zap.Logger) (*feed.Store, http1.Handler, func() error, error) {
	opts := cfg.store
	opts.Logger = log
	closeLog := func() error { return nil }
	if cfg.fleet != nil {
		l, err := openFleetLog(ctx, cfg, log)
		if err != nil {
			return nil, nil, nil, err
		}
		opts.Log, closeLog = l, l.Close
	}
	store, err := feed.Open(ctx, cfg.db, opts)
	if err != nil {
		closeLog()
		return nil, nil, nil, err
	}
	handler, closeWorkloads, err := openWorkloads(ctx, cfg.products,
		feed.NewHandler(feed.HandlerConfig{Store: store, Secret: []byte(cfg.secret), Logger: log}), cfg.compress, log)
	if err != nil {
		store.Close()
		closeLog()
		return nil, nil, nil, err
	}
	// The log closes after the Store, which still applies what it published as it closes
	// (runServe's defers run closeWorkloads, then store.Close, then the log's).
	closeAll := func() error { return errors.Join(closeWorkloads(), store.Close(), closeLog()) }
	return store, handler, closeAll, nil
}

// listenChecked listens (listen) and checks the secret against the socket itself, bound or
// inherited: its address, not HOST, says who can reach it.
func listenChecked(cfg serveConfig, log *zap.Logger) (net.Listener, error) {
	ln, err := listen(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkSecret(cfg.secret, cfg.challengeSecret, ln.Addr(), log); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// supervised is what a worker under a supervisor reports on and hands over.
type supervised struct {
	cfg   serveConfig
	srv   *http1.Server
	store *feed.Store
	ln    net.Listener
	log   *zap.Logger
}

// greet tells the supervisor the worker is ready, and whether it outlives the supervisor (it
// cleared its parent-death signal in init, seeing EnvAdopt): the supervisor allows an upgrade
// only when every worker does.
func (w supervised) greet(sup *ipc.Conn) {
	if err := sup.Send(ipc.Msg{Type: ipc.TypeReady, PID: os.Getpid(), Rejoin: w.cfg.adopt != ""}); err != nil {
		w.log.Warn("tell supervisor ready", zap.Error(err))
	}
}

// serveSupervisor answers the supervisor's requests until the channel fails or ctx is done;
// when the supervisor is gone and the worker may be adopted, it serves on and waits for the
// next one, which takes over this socket and its queue.
func (w supervised) serveSupervisor(ctx context.Context, sup *ipc.Conn, probe *healthProbe) error {
	srv, store, log := w.srv, w.store, w.log
	stats := func() ipc.Msg {
		st := srv.Stats()
		healthy, why := probe.result()
		wp := store.WritePath()
		report, _ := json.Marshal(writepath.Report{WritePath: &wp}) // counters and slices of them: cannot fail
		return ipc.Msg{PID: os.Getpid(), Requests: st.Requests, Accepted: st.Accepted,
			Connections: st.Connections, LoopConnections: st.LoopConnections,
			Healthy: healthy, Error: why, Role: store.WriteRole(), Report: report, NotServing: store.Serving()}
	}
	// The supervisor's `drain` (the host leaving its balancer) turns keep-alive off,
	// `ready` back on: the worker serves on throughout.
	h := ipc.Handlers{Stats: stats, KeepAlive: func(on bool) {
		srv.SetKeepAlive(on)
		log.Info("keep-alive set by the supervisor", zap.Bool("on", on))
	}}
	err := sup.ServeWith(ctx, h)
	for errors.Is(err, ipc.ErrParentGone) && w.cfg.adopt != "" && ctx.Err() == nil {
		// The supervisor is gone (killed, or re-executing itself to upgrade): serve on
		// and wait for the next one, which takes over this socket and its queue.
		log.Warn("supervisor gone: serving on, waiting for a new one", zap.String("rendezvous", w.cfg.adopt), zap.Duration("wait", w.cfg.adoptWait))
		var next *ipc.Conn
		if next, err = rejoin(ctx, w.cfg, w.ln); err != nil {
			break
		}
		sup.Close()
		sup = next
		log.Info("adopted by a new supervisor")
		err = sup.ServeWith(ctx, h)
	}
	return err
}

// waitForStop waits for the first reason to stop: a signal, the supervisor's channel
// ending, ctx, or the server failing (an error).
func waitForStop(ctx context.Context, sigs <-chan os.Signal, stopReason <-chan string, serveErr <-chan error) (string, error) {
	select {
	case s := <-sigs:
		return "signal " + s.String(), nil
	case reason := <-stopReason:
		return reason, nil
	case err := <-serveErr:
		return "", fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		return "context done", nil
	}
}

// drain stops the worker gracefully: hand the writes over, stop accepting, let requests in
// flight finish and close idle keep-alives. A second signal or the drain timeout forces the
// remaining connections closed. It then stops the supervisor's channel (cancel) and waits
// for it, and logs how the drain went.
func drain(cfg serveConfig, srv *http1.Server, store *feed.Store, log *zap.Logger, reason string,
	sigs <-chan os.Signal, serveErr <-chan error, cancel context.CancelFunc, ipcDone <-chan struct{}) {
	st := srv.Stats()
	log.Info("draining", zap.String("reason", reason), zap.Duration("deadline", cfg.drainTimeout),
		zap.Int64("connections", st.Connections), zap.Int64s("loop_connections", st.LoopConnections))

	// A leaving worker owns no writes: the workers that stay elect their owner now, while
	// this one still answers (its own remaining writes commit here).
	store.HandOverWrites()

	dctx, dcancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
	defer dcancel()
	go func() {
		select {
		case s := <-sigs:
			log.Warn("second signal: closing connections now", zap.String("signal", s.String()))
			dcancel()
		case <-dctx.Done():
		}
	}()
	start := time.Now()
	err := srv.Shutdown(dctx)
	<-serveErr
	cancel()
	<-ipcDone
	st = srv.Stats()
	if err != nil {
		log.Warn("drain cut short", zap.Error(err), zap.Duration("took", time.Since(start)),
			zap.Uint64("requests", st.Requests))
		return
	}
	ds := store.Stats()
	log.Info("stopped", zap.Duration("drain", time.Since(start)), zap.Uint64("requests", st.Requests),
		zap.Uint64("connections_refused", st.Refused), zap.Any("db", ds))
}

// rejoin waits at the rendezvous socket for a new supervisor (ipc.Rejoin), passing it the
// listening socket; the new supervisor's output pipe replaces stdout and stderr, which went
// with the old one.
func rejoin(ctx context.Context, cfg serveConfig, ln net.Listener) (*ipc.Conn, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("rejoin: the listener %T cannot be passed on", ln)
	}
	// Not the listener's File method: the Fd call that passes it would make the socket
	// blocking here and under the new supervisor's workers (ipc.SocketFile).
	lf, err := ipc.SocketFile(sc, "listener")
	if err != nil {
		return nil, fmt.Errorf("rejoin: %w", err)
	}
	defer lf.Close()
	started, err := procstat.StartTime("", os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("rejoin: %w", err)
	}
	c, out, err := ipc.Rejoin(ctx, cfg.adopt, ipc.Hello{PID: os.Getpid(), Slot: cfg.workerID, Started: started}, lf, cfg.adoptWait)
	if err != nil {
		return nil, err
	}
	if out != nil {
		// The logger writes to fd 2 (os.Stderr), so the new pipe takes its lines from now on.
		syscall.Dup3(int(out.Fd()), 1, 0) // Dup3: every Linux architecture has it
		syscall.Dup3(int(out.Fd()), 2, 0)
		out.Close()
	}
	return c, nil
}

// listen returns the inherited socket (fd 3) or binds addr with SO_REUSEPORT, so several
// workers started by hand share the port.
func listen(cfg serveConfig) (net.Listener, error) {
	if cfg.inherited {
		f := os.NewFile(uintptr(ipc.ListenFD), "listener")
		ln, err := net.FileListener(f)
		f.Close() // FileListener holds its own duplicate
		if err != nil {
			return nil, fmt.Errorf("use inherited socket (fd %d): %w", ipc.ListenFD, err)
		}
		return ln, nil
	}
	// Plain TCP, SO_REUSEPORT: several hand-started workers (or a self_bind cluster) share
	// the port.
	ln, err := steering.Listen(context.Background(), cfg.addr)
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// raiseFileLimit lifts the soft descriptor limit to the hard one: 15,000 keep-alive
// connections need 15,000 descriptors, and the usual soft limit is 1,024. (Go does this
// itself since 1.19; doing it here makes it explicit and logged.)
func raiseFileLimit(log *zap.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("read descriptor limit", zap.Error(err))
		return
	}
	before := lim.Cur
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			log.Warn("raise descriptor limit", zap.Error(err), zap.Uint64("soft", before), zap.Uint64("hard", lim.Max))
			return
		}
	}
	log.Info("descriptor limit", zap.Uint64("soft_before", before), zap.Uint64("soft", lim.Cur), zap.Uint64("hard", lim.Max))
}

// newLogger writes to w at level, in format (ipc.LogJSON or ipc.LogConsole).
func newLogger(w io.Writer, level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("LOG_LEVEL %q: want debug, info, warn or error", level)
	}
	// The supervisor's own lines (ipc.NewLogEncoder): under it, a worker's event reads as
	// one of its own after the `ID|APP |` prefix.
	core := zapcore.NewCore(ipc.NewLogEncoder(format), zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core), nil
}

// minSecretLen is the least secret length that draws no warning: HS256's key is as strong as
// its secret, and RFC 7518 (3.2) asks for a key at least as long as the hash, 32 bytes.
const minSecretLen = 32

// checkSecret refuses the challenge's published secret on a socket that other hosts may
// reach, unless allowPublic (-challenge-secret) says this is the challenge: with it, anyone
// who reaches the port signs tokens and posts and likes as any user. On loopback (and a unix
// socket) only this host's processes can connect, so the benchmarks and tests keep it. A
// secret of our own shorter than minSecretLen is served with a warning.
func checkSecret(secret string, allowPublic bool, addr net.Addr, log *zap.Logger) error {
	if secret != DefaultSecret {
		if len(secret) < minSecretLen {
			log.Warn("JWT_SECRET is short: an HS256 secret should hold at least 32 random bytes (`make run` makes one in data/jwt_secret)",
				zap.Int("bytes", len(secret)))
		}
		return nil
	}
	switch {
	case allowPublic:
		log.Info("serving with the challenge's published JWT secret (-challenge-secret)", zap.String("addr", addr.String()))
		return nil
	case localOnly(addr):
		log.Warn("JWT_SECRET is the challenge's published secret: accepted on loopback only (anyone can sign tokens with it)",
			zap.String("addr", addr.String()))
		return nil
	}
	return fmt.Errorf("JWT_SECRET is the challenge's published secret (%s) and the worker listens on %s, which other hosts may reach: "+
		"anyone could sign tokens and post and like as any user. Set JWT_SECRET (or JWT_SECRET_FILE) to a secret of your own "+
		"(`make run` makes one in data/jwt_secret; or: head -c 32 /dev/urandom | base64), listen on 127.0.0.1, "+
		"or pass -challenge-secret (env ALLOW_CHALLENGE_SECRET=1) if this is the challenge's official check", DefaultSecret, addr)
}

// localOnly reports whether only this host's processes can connect to addr: a loopback
// address or a unix socket. The unspecified address (0.0.0.0, ::) is every interface.
func localOnly(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}

// readSecret returns the HS256 secret: JWT_SECRET, or the contents of the file
// JWT_SECRET_FILE names (the _FILE convention of container images; systemd's
// LoadCredential= puts it in $CREDENTIALS_DIRECTORY), less one trailing newline. Both set is
// an error: which one wins would be a guess. The secret is never logged.
func readSecret(getenv func(string) string) (string, error) {
	secret, file := getenv("JWT_SECRET"), getenv("JWT_SECRET_FILE")
	if file == "" {
		return secret, nil
	}
	if secret != "" {
		return "", errors.New("JWT_SECRET and JWT_SECRET_FILE are both set: keep one (the file keeps the secret out of the environment)")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("JWT_SECRET_FILE: read secret: %w", err)
	}
	secret = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if secret == "" {
		return "", fmt.Errorf("JWT_SECRET_FILE %s is empty: it should hold the HS256 secret", file)
	}
	return secret, nil
}
