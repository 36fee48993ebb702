package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/onehost/onehost/internal/contentcoding"
	"github.com/onehost/onehost/internal/feed"
	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/steering"
)

// serveConfig is everything runServe needs, parsed from flags and environment.
type serveConfig struct {
	db           string
	products     string // the products database of the workload routes (routes.go)
	secret       string
	addr         string
	workerID     int
	drainTimeout time.Duration
	idleGrace    time.Duration
	logLevel     string
	cpuProfile   string
	transport    string // http1.Server.Transport
	// inherited: serve fd 3 (LISTEN_FDS) instead of binding addr.
	inherited bool
	// ipcFD is the supervisor channel's descriptor, or -1.
	ipcFD int
	// adopt is the rendezvous socket where a worker that lost its supervisor waits for the
	// next one, at most adoptWait (ipc.EnvAdopt, ipc.EnvAdoptWait); "" to drain at once.
	adopt     string
	adoptWait time.Duration
	// store holds the database settings of the flags below (writes, commit window, ...).
	store feed.Options
	// challengeSecret accepts the challenge's published secret on any address (the
	// challenge's official checks); without it that secret is refused off loopback.
	challengeSecret bool
	// compress encodes the answers of the routes in it (routes.go); off by default.
	compress compressConfig
}

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := serveConfig{ipcFD: -1}
	fs.StringVar(&c.db, "db", getenv("SQLITE_PATH"), "the database file, a copy of the seed (env SQLITE_PATH)")
	fs.StringVar(&c.products, "products", getenv("PRODUCTS_PATH"), "the products database of /api/products and /products, generated if missing (env PRODUCTS_PATH; default products.db beside -db)")
	host := fs.String("host", envOr(getenv, "HOST", "127.0.0.1"), "address to bind when not given a socket (env HOST)")
	port := fs.String("port", envOr(getenv, "PORT", "3000"), "port to bind when not given a socket; 0 picks one (env PORT)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 10*time.Second, "how long a graceful stop waits for requests in flight")
	fs.DurationVar(&c.idleGrace, "idle-grace", time.Second, "during a graceful stop, how long idle keep-alive connections stay open so a request already sent is answered (with Connection: close)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (for docs/performance.md)")
	fs.StringVar(&c.transport, "transport", envOr(getenv, "TRANSPORT", http1.TransportLoop),
		"how connections are served: loop (an epoll event loop; idle connections cost no goroutine and no buffer) or goroutine (one each, on Go's netpoller) (env TRANSPORT)")
	fs.BoolVar(&c.challengeSecret, "challenge-secret", false,
		"this is the challenge: accept its published JWT secret ("+DefaultSecret+") on a non-loopback address, where anyone who reaches the port could sign tokens with it (env ALLOW_CHALLENGE_SECRET=1)")
	fs.StringVar(&c.logLevel, "log-level", envOr(getenv, "LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL)")
	fs.StringVar(&c.store.Writes, "writes", envOr(getenv, "WRITES", feed.WritesOwner),
		"how the processes on one database file share writes: owner (one elected process commits them all in group commits) or flock (each commits its own, taking turns through a flock) (env WRITES)")
	window := fs.String("commit-window", envOr(getenv, "COMMIT_WINDOW", "4ms"),
		"the least time between the starts of two small group commits (8 or more waiting writes commit at once); 0: none (env COMMIT_WINDOW)")
	commitMax := fs.String("commit-max", envOr(getenv, "COMMIT_MAX", "128"), "the most writes in one group commit (env COMMIT_MAX)")
	ownerProcs := fs.String("owner-gomaxprocs", envOr(getenv, "OWNER_GOMAXPROCS", "0"),
		"GOMAXPROCS while this worker is the write owner, when above its own (a second P runs the commits and the followers' writes while the event loop serves HTTP); 0: unchanged (env OWNER_GOMAXPROCS)")
	writeTimeout := fs.String("write-timeout", envOr(getenv, "WRITE_TIMEOUT", "5s"),
		"how long a write sent to the write owner waits for its answer before it fails with 503 (env WRITE_TIMEOUT)")
	mmap := fs.String("mmap-size", envOr(getenv, "SQLITE_MMAP_SIZE", "1073741824"),
		"bytes of the database read through mmap where no other connection's commits reach the reads (the write owner); 0: none, pread only (env SQLITE_MMAP_SIZE)")
	fs.StringVar(&c.store.Synchronous, "synchronous", envOr(getenv, "SYNCHRONOUS", feed.SyncNormal),
		"normal: a write is answered once committed to the WAL, durable against a crash of the process but not a power cut or kernel panic before the next checkpoint; full: the WAL is also synced at every (group) commit, durable against those too (env SYNCHRONOUS; docs/reliability.md)")
	ckpt := fs.String("checkpoint-interval", envOr(getenv, "CHECKPOINT_INTERVAL", "250ms"),
		"how often the WAL is checkpointed (env CHECKPOINT_INTERVAL)")
	compress := fs.String("compress", envOr(getenv, "COMPRESS", "off"),
		"content codings for the -compress-routes' answers, in the server's order of preference, each with an optional level: gzip[:1-9],zstd[:1-4],br[:1-11], e.g. zstd,gzip:6; off: none (the default; the static page is always served precompressed) (env COMPRESS)")
	compressRoutes := fs.String("compress-routes", envOr(getenv, "COMPRESS_ROUTES", "heavy,products"),
		"which routes -compress encodes: heavy (PATCH /api/resource/:id), products (/api/products, /products), feed (the challenge's API), hello (env COMPRESS_ROUTES)")
	compressMin := fs.String("compress-min", envOr(getenv, "COMPRESS_MIN", strconv.Itoa(contentcoding.DefaultMinSize)),
		"answers shorter than this many bytes go uncompressed (env COMPRESS_MIN)")
	if v := getenv("ALLOW_CHALLENGE_SECRET"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("ALLOW_CHALLENGE_SECRET %q: want 1 or 0 (true or false)", v)
		}
		c.challengeSecret = b // the flag, parsed next, wins
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.transport != http1.TransportGoroutine && c.transport != http1.TransportLoop {
		return c, fmt.Errorf("TRANSPORT (-transport) %q: want %s or %s", c.transport, http1.TransportGoroutine, http1.TransportLoop)
	}
	if c.store.Writes != feed.WritesOwner && c.store.Writes != feed.WritesFlock {
		return c, fmt.Errorf("WRITES %q: want %s or %s", c.store.Writes, feed.WritesOwner, feed.WritesFlock)
	}
	if c.store.Synchronous = strings.ToLower(c.store.Synchronous); c.store.Synchronous != feed.SyncNormal && c.store.Synchronous != feed.SyncFull {
		return c, fmt.Errorf("SYNCHRONOUS (-synchronous) %q: want %s (durable against a crash of the process; the default) or %s (also against a power cut: one fsync per group commit)",
			c.store.Synchronous, feed.SyncNormal, feed.SyncFull)
	}
	for _, d := range []struct {
		name, flag, val string
		min, max        time.Duration
		into            *time.Duration
	}{
		{"COMMIT_WINDOW", "commit-window", *window, 0, time.Second, &c.store.CommitWindow},
		{"WRITE_TIMEOUT", "write-timeout", *writeTimeout, 10 * time.Millisecond, 10 * time.Minute, &c.store.WriteTimeout},
		{"CHECKPOINT_INTERVAL", "checkpoint-interval", *ckpt, time.Millisecond, time.Hour, &c.store.CheckpointInterval},
	} {
		v, err := time.ParseDuration(d.val)
		if err != nil || v < d.min || v > d.max {
			return c, fmt.Errorf("%s (-%s) %q: want a duration from %v to %v, such as 2ms", d.name, d.flag, d.val, d.min, d.max)
		}
		*d.into = v
	}
	if c.store.CommitWindow == 0 {
		c.store.CommitWindow = -1 // feed.Options: negative is none, zero the default
	}
	if n, err := strconv.Atoi(*commitMax); err != nil || n < 1 || n > 100000 {
		return c, fmt.Errorf("COMMIT_MAX (-commit-max) %q: want a number of writes from 1 to 100000", *commitMax)
	} else {
		c.store.CommitMax = n
	}
	if n, err := strconv.Atoi(*ownerProcs); err != nil || n < 0 || n > 1024 {
		return c, fmt.Errorf("OWNER_GOMAXPROCS (-owner-gomaxprocs) %q: want a number of Ps from 0 (unchanged) to 1024", *ownerProcs)
	} else {
		c.store.OwnerProcs = n
	}
	if n, err := strconv.ParseInt(*mmap, 10, 64); err != nil || n < 0 {
		return c, fmt.Errorf("SQLITE_MMAP_SIZE (-mmap-size) %q: want a number of bytes >= 0 (0: no mmap)", *mmap)
	} else if c.store.MmapSize = n; n == 0 {
		c.store.MmapSize = -1 // feed.Options: negative is none, zero the default
	}
	cc, err := parseCompress(*compress, *compressRoutes, *compressMin)
	if err != nil {
		return c, err
	}
	c.compress = cc
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (subcommands: seed, seed-products, serve)", fs.Arg(0))
	}
	secret, err := readSecret(getenv)
	if err != nil {
		return c, err
	}
	c.secret = secret
	c.addr = net.JoinHostPort(*host, *port)
	if c.products == "" && c.db != "" {
		c.products = defaultProductsPath(c.db)
	}
	if c.db == "" {
		return c, errors.New("SQLITE_PATH is not set: point it (or -db) at a copy of the seed database; `worker seed -db PATH` writes one")
	}
	if c.secret == "" {
		return c, errors.New("JWT_SECRET is empty: set it (or JWT_SECRET_FILE, a file holding it) to the HS256 secret of the tokens (the challenge uses twelve-dollar-challenge)")
	}
	if p, err := strconv.Atoi(*port); err != nil || p < 0 || p > 65535 {
		return c, fmt.Errorf("PORT %q: want a number from 0 to 65535", *port)
	}
	if v := getenv(ipc.EnvWorkerID); v != "" {
		id, err := strconv.Atoi(v)
		if err != nil || id < 0 {
			return c, fmt.Errorf("%s %q: want a slot index >= 0", ipc.EnvWorkerID, v)
		}
		c.workerID = id
	}
	if v := getenv(ipc.EnvListenFDs); v != "" {
		if v != "1" {
			return c, fmt.Errorf("%s=%s: a worker serves exactly one inherited socket", ipc.EnvListenFDs, v)
		}
		if p := getenv(ipc.EnvListenPID); p != "" && p != strconv.Itoa(os.Getpid()) {
			return c, fmt.Errorf("%s=%s is not this process (%d): the socket was meant for another", ipc.EnvListenPID, p, os.Getpid())
		}
		c.inherited = true
	}
	if v := getenv(ipc.EnvFD); v != "" {
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return c, fmt.Errorf("%s %q: want a descriptor number >= 3", ipc.EnvFD, v)
		}
		c.ipcFD = fd
	}
	if c.adopt = getenv(ipc.EnvAdopt); c.adopt != "" {
		c.adoptWait = ipc.AdoptWait(getenv(ipc.EnvAdoptWait))
	}
	return c, nil
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parseServe(args, getenv, stderr)
	if err != nil {
		return err
	}
	base, err := newLogger(stderr, cfg.logLevel)
	if err != nil {
		return err
	}
	defer base.Sync()
	log := base.With(zap.Int("worker", cfg.workerID), zap.Int("pid", os.Getpid()))

	// Signals are watched from the start, so a TERM during start-up is a clean stop.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if cfg.adopt != "" {
		// It may outlive its supervisor, and its output pipe with it: a log line written
		// there must fail, not kill the worker (Go's default for SIGPIPE on fds 1 and 2).
		signal.Ignore(syscall.SIGPIPE)
	}
	defer signal.Stop(sigs)

	raiseFileLimit(log)

	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return fmt.Errorf("create cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("start cpu profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	opts := cfg.store
	opts.Logger = log
	store, err := feed.Open(ctx, cfg.db, opts)
	if err != nil {
		return err
	}
	defer store.Close()
	handler, closeWorkloads, err := openWorkloads(ctx, cfg.products,
		feed.NewHandler(feed.HandlerConfig{Store: store, Secret: []byte(cfg.secret), Logger: log}), cfg.compress, log)
	if err != nil {
		return err
	}
	defer closeWorkloads()

	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	// Checked on the socket itself, bound or inherited: its address, not HOST, says who can
	// reach it.
	if err := checkSecret(cfg.secret, cfg.challengeSecret, ln.Addr(), log); err != nil {
		ln.Close()
		return err
	}
	srv := &http1.Server{
		Handler:   handler,
		Logger:    log,
		IdleGrace: cfg.idleGrace,
		Transport: cfg.transport,
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
		// The greeting: ready, and whether it outlives the supervisor (it cleared its
		// parent-death signal in init, seeing EnvAdopt): the supervisor allows an upgrade
		// only when every worker does.
		if err := sup.Send(ipc.Msg{Type: ipc.TypeReady, PID: os.Getpid(), Rejoin: cfg.adopt != ""}); err != nil {
			log.Warn("tell supervisor ready", zap.Error(err))
		}
		probe := startHealthProbe(ctx, store.Ping, log) // stops with ctx, waited for below
		go func() {
			defer close(ipcDone)
			defer probe.wait()
			stats := func() ipc.Msg {
				st := srv.Stats()
				healthy, why := probe.result()
				wp := store.WritePath()
				return ipc.Msg{PID: os.Getpid(), Requests: st.Requests, Accepted: st.Accepted,
					Connections: st.Connections, LoopConnections: st.LoopConnections,
					Healthy: healthy, Error: why, Writes: store.WriteRole(), WritePath: &wp}
			}
			// The supervisor's `drain` (the host leaving its balancer) turns keep-alive off,
			// `ready` back on: the worker serves on throughout.
			h := ipc.Handlers{Stats: stats, KeepAlive: func(on bool) {
				srv.SetKeepAlive(on)
				log.Info("keep-alive set by the supervisor", zap.Bool("on", on))
			}}
			err := sup.ServeWith(ctx, h)
			for errors.Is(err, ipc.ErrParentGone) && cfg.adopt != "" && ctx.Err() == nil {
				// The supervisor is gone (killed, or re-executing itself to upgrade): serve on
				// and wait for the next one, which takes over this socket and its queue.
				log.Warn("supervisor gone: serving on, waiting for a new one", zap.String("rendezvous", cfg.adopt), zap.Duration("wait", cfg.adoptWait))
				var next *ipc.Conn
				if next, err = rejoin(ctx, cfg, ln); err != nil {
					break
				}
				sup.Close()
				sup = next
				log.Info("adopted by a new supervisor")
				err = sup.ServeWith(ctx, h)
			}
			if ctx.Err() == nil {
				stopReason <- err.Error()
			}
		}()
	} else {
		close(ipcDone)
	}

	var reason string
	select {
	case s := <-sigs:
		reason = "signal " + s.String()
	case reason = <-stopReason:
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		reason = "context done"
	}
	st := srv.Stats()
	log.Info("draining", zap.String("reason", reason), zap.Duration("deadline", cfg.drainTimeout),
		zap.Int64("connections", st.Connections), zap.Int64s("loop_connections", st.LoopConnections))

	// A leaving worker owns no writes: the workers that stay elect their owner now, while
	// this one still answers (its own remaining writes commit here).
	store.HandOverWrites()

	// Drain: stop accepting, let requests in flight finish, close idle keep-alives. A
	// second signal or the deadline forces the remaining connections closed.
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
	err = srv.Shutdown(dctx)
	<-serveErr
	cancel()
	<-ipcDone
	st = srv.Stats()
	if err != nil {
		log.Warn("drain cut short", zap.Error(err), zap.Duration("took", time.Since(start)),
			zap.Uint64("requests", st.Requests))
		return nil
	}
	ds := store.Stats()
	log.Info("stopped", zap.Duration("drain", time.Since(start)), zap.Uint64("requests", st.Requests),
		zap.Any("db", ds))
	return nil
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

// newLogger writes JSON lines to w.
func newLogger(w io.Writer, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("LOG_LEVEL %q: want debug, info, warn or error", level)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
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
