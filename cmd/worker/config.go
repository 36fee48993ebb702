package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/contentcoding"
	"github.com/onehost/onehost/internal/feed"
	"github.com/onehost/onehost/internal/fleetspec"
	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/ipc"
)

// serveConfig is everything runServe needs, parsed from flags and environment.
type serveConfig struct {
	fleet        *fleetspec.Spec // ONEHOST_FLEET...: the fleet's write log (fleet.go); nil alone
	db           string
	products     string // the products database of the workload routes (routes.go)
	secret       string
	addr         string
	workerID     int
	drainTimeout time.Duration
	idleGrace    time.Duration
	logLevel     string
	logFormat    string // json (by hand) or console (under a supervisor printing console lines)
	check        bool   // -check: judge this config, print ok, serve nothing (check.go)
	cpuProfile   string
	blockProfile string // written at exit, as go test -blockprofile
	mutexProfile string // written at exit, as go test -mutexprofile
	trace        string // execution trace of the whole run, as go test -trace
	loops        int    // event loops of the loop transport; 0: GOMAXPROCS
	maxConns     int    // http1.Server.MaxConns; 0: the descriptor limit less a reserve
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

// serveFlags holds the flags that parseServe checks and converts after parsing, as given.
type serveFlags struct {
	host, port                            *string
	window, commitMax, ownerProcs, loops  *string
	maxConns                              *string
	writeTimeout, mmap, ckpt              *string
	compress, compressRoutes, compressMin *string
}

// parseServe reads the flags and environment into a serveConfig: define the flags, read
// ALLOW_CHALLENGE_SECRET, parse, then check each group in turn (modes, store settings,
// compression, the secret and address, what the supervisor passed).
func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := serveConfig{ipcFD: -1}
	raw := defineServeFlags(fs, &c, getenv)
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
	if err := c.checkModes(); err != nil {
		return c, err
	}
	if err := c.parseStore(raw); err != nil {
		return c, err
	}
	if err := c.parseFleet(getenv); err != nil {
		return c, err
	}
	cc, err := parseCompress(*raw.compress, *raw.compressRoutes, *raw.compressMin)
	if err != nil {
		return c, err
	}
	c.compress = cc
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (subcommands: seed, seed-products, serve)", fs.Arg(0))
	}
	if err := c.parseSecretAndAddr(raw, getenv); err != nil {
		return c, err
	}
	if err := c.parseSupervisorEnv(getenv); err != nil {
		return c, err
	}
	return c, nil
}

// defineServeFlags defines the worker's flags on fs: those stored as given go into c, the
// rest are returned to be checked after parsing.
func defineServeFlags(fs *flag.FlagSet, c *serveConfig, getenv func(string) string) serveFlags {
	var raw serveFlags
	fs.StringVar(&c.db, "db", getenv("SQLITE_PATH"), "the database file, a copy of the seed (env SQLITE_PATH)")
	fs.StringVar(&c.products, "products", getenv("PRODUCTS_PATH"), "the products database of /api/products and /products, generated if missing (env PRODUCTS_PATH; default products.db beside -db)")
	raw.host = fs.String("host", envOr(getenv, "HOST", "127.0.0.1"), "address to bind when not given a socket (env HOST)")
	raw.port = fs.String("port", envOr(getenv, "PORT", "3000"), "port to bind when not given a socket; 0 picks one (env PORT)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 10*time.Second, "how long a graceful stop waits for requests in flight")
	fs.DurationVar(&c.idleGrace, "idle-grace", time.Second, "during a graceful stop, how long idle keep-alive connections stay open so a request already sent is answered (with Connection: close)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (for docs/performance.md)")
	fs.StringVar(&c.blockProfile, "blockprofile", "", "record where goroutines wait (channels, locks, select) and write the profile to this file at exit, as go test -blockprofile does; costs CPU while on")
	fs.StringVar(&c.trace, "trace", "", "write an execution trace of the whole run to this file, as go test -trace does (go tool trace reads it: where the scheduler left a core idle)")
	fs.StringVar(&c.mutexProfile, "mutexprofile", "", "record contended mutexes and write the profile to this file at exit, as go test -mutexprofile does")
	raw.loops = fs.String("loops", envOr(getenv, "LOOPS", "0"), "event loops of the loop transport; 0 is one per GOMAXPROCS (env LOOPS)")
	raw.maxConns = fs.String("max-conns", envOr(getenv, "MAX_CONNS", "0"),
		"the most connections open at once; past it a new one is closed at once, unserved, and counted; 0: the descriptor limit less "+strconv.Itoa(http1.DescriptorReserve)+" (env MAX_CONNS)")
	fs.StringVar(&c.transport, "transport", envOr(getenv, "TRANSPORT", http1.TransportLoop),
		"how connections are served: loop (an epoll event loop; idle connections cost no goroutine and no buffer) or goroutine (one each, on Go's netpoller) (env TRANSPORT)")
	fs.BoolVar(&c.challengeSecret, "challenge-secret", false,
		"this is the challenge: accept its published JWT secret ("+DefaultSecret+") on a non-loopback address, where anyone who reaches the port could sign tokens with it (env ALLOW_CHALLENGE_SECRET=1)")
	fs.StringVar(&c.logLevel, "log-level", envOr(getenv, "LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL)")
	fs.StringVar(&c.logFormat, "log-format", envOr(getenv, ipc.EnvLogFormat, ipc.LogJSON),
		"json: one JSON object per line; console: one readable line per event, as the supervisor's own (env "+ipc.EnvLogFormat+", which the supervisor sets to its -log-format)")
	fs.BoolVar(&c.check, "check", false, "check the flags and environment as a start would, print ok and exit, opening and binding nothing (`supervisor run -check` asks this of the worker)")
	fs.StringVar(&c.store.Writes, "writes", envOr(getenv, "WRITES", feed.WritesOwner),
		"how the processes on one database file share writes: owner (one elected process commits them all in group commits) or flock (each commits its own, taking turns through a flock) (env WRITES)")
	raw.window = fs.String("commit-window", envOr(getenv, "COMMIT_WINDOW", feed.DefaultCommitWindow.String()),
		"the least time between the starts of two small group commits (8 or more waiting writes commit at once); 0: none (env COMMIT_WINDOW)")
	raw.commitMax = fs.String("commit-max", envOr(getenv, "COMMIT_MAX", "128"), "the most writes in one group commit (env COMMIT_MAX)")
	raw.ownerProcs = fs.String("owner-gomaxprocs", envOr(getenv, "OWNER_GOMAXPROCS", "0"),
		"GOMAXPROCS while this worker is the write owner, when above its own (a second P runs the commits and the followers' writes while the event loop serves HTTP); 0: unchanged (env OWNER_GOMAXPROCS)")
	raw.writeTimeout = fs.String("write-timeout", envOr(getenv, "WRITE_TIMEOUT", "5s"),
		"how long a write sent to the write owner waits for its answer before it fails with 503 (env WRITE_TIMEOUT)")
	raw.mmap = fs.String("mmap-size", envOr(getenv, "SQLITE_MMAP_SIZE", "1073741824"),
		"bytes of the database read through mmap where no other connection's commits reach the reads (the write owner); 0: none, pread only (env SQLITE_MMAP_SIZE)")
	fs.StringVar(&c.store.Synchronous, "synchronous", envOr(getenv, "SYNCHRONOUS", feed.SyncNormal),
		"normal: a write is answered once committed to the WAL, durable against a crash of the process but not a power cut or kernel panic before the next checkpoint; full: the WAL is also synced at every (group) commit, durable against those too (env SYNCHRONOUS; docs/reliability.md)")
	raw.ckpt = fs.String("checkpoint-interval", envOr(getenv, "CHECKPOINT_INTERVAL", "250ms"),
		"how often the WAL is checkpointed (env CHECKPOINT_INTERVAL)")
	raw.compress = fs.String("compress", envOr(getenv, "COMPRESS", "off"),
		"content codings for the -compress-routes' answers, in the server's order of preference, each with an optional level: "+codingLevels()+
			" (higher levels cost more than "+strconv.Itoa(contentcoding.MaxCostFactor)+"× an uncompressed request's CPU), e.g. zstd,gzip:6; off: none (the default; the static page is always served precompressed, at the best levels) (env COMPRESS)")
	raw.compressRoutes = fs.String("compress-routes", envOr(getenv, "COMPRESS_ROUTES", "heavy,products"),
		"which routes -compress encodes: heavy (PATCH /api/resource/:id), products (/api/products, /products), feed (the challenge's API), hello (env COMPRESS_ROUTES)")
	raw.compressMin = fs.String("compress-min", envOr(getenv, "COMPRESS_MIN", strconv.Itoa(contentcoding.DefaultMinSize)),
		"answers shorter than this many bytes go uncompressed (env COMPRESS_MIN)")
	return raw
}

// codingLevels is -compress's codings with the levels it accepts: "gzip[:1-6],…,br[:1]".
func codingLevels() string {
	var parts []string
	for _, k := range []contentcoding.Coding{contentcoding.Gzip, contentcoding.Zstd, contentcoding.Br} {
		lo, _ := contentcoding.EncoderLevels(k)
		levels := strconv.Itoa(lo)
		if hi := contentcoding.MaxDynamicLevel(k); hi > lo {
			levels += "-" + strconv.Itoa(hi)
		}
		parts = append(parts, k.String()+"[:"+levels+"]")
	}
	return strings.Join(parts, ",")
}

// checkModes checks the flags that choose between named modes.
func (c *serveConfig) checkModes() error {
	if c.transport != http1.TransportGoroutine && c.transport != http1.TransportLoop {
		return fmt.Errorf("TRANSPORT (-transport) %q: want %s or %s", c.transport, http1.TransportGoroutine, http1.TransportLoop)
	}
	if c.logFormat != ipc.LogJSON && c.logFormat != ipc.LogConsole {
		return fmt.Errorf("%s (-log-format) %q: want %s or %s", ipc.EnvLogFormat, c.logFormat, ipc.LogJSON, ipc.LogConsole)
	}
	if c.store.Writes != feed.WritesOwner && c.store.Writes != feed.WritesFlock {
		return fmt.Errorf("WRITES %q: want %s or %s", c.store.Writes, feed.WritesOwner, feed.WritesFlock)
	}
	if c.store.Synchronous = strings.ToLower(c.store.Synchronous); c.store.Synchronous != feed.SyncNormal && c.store.Synchronous != feed.SyncFull {
		return fmt.Errorf("SYNCHRONOUS (-synchronous) %q: want %s (durable against a crash of the process; the default) or %s (also against a power cut: one fsync per group commit)",
			c.store.Synchronous, feed.SyncNormal, feed.SyncFull)
	}
	return nil
}

// parseStore converts the database settings (durations and counts) into c.store.
func (c *serveConfig) parseStore(raw serveFlags) error {
	for _, d := range []struct {
		name, flag, val string
		min, max        time.Duration
		into            *time.Duration
	}{
		{"COMMIT_WINDOW", "commit-window", *raw.window, 0, time.Second, &c.store.CommitWindow},
		{"WRITE_TIMEOUT", "write-timeout", *raw.writeTimeout, 10 * time.Millisecond, 10 * time.Minute, &c.store.WriteTimeout},
		{"CHECKPOINT_INTERVAL", "checkpoint-interval", *raw.ckpt, time.Millisecond, time.Hour, &c.store.CheckpointInterval},
	} {
		v, err := time.ParseDuration(d.val)
		if err != nil || v < d.min || v > d.max {
			return fmt.Errorf("%s (-%s) %q: want a duration from %v to %v, such as 2ms", d.name, d.flag, d.val, d.min, d.max)
		}
		*d.into = v
	}
	if c.store.CommitWindow == 0 {
		c.store.CommitWindow = -1 // feed.Options: negative is none, zero the default
	}
	if n, err := strconv.Atoi(*raw.commitMax); err != nil || n < 1 || n > 100000 {
		return fmt.Errorf("COMMIT_MAX (-commit-max) %q: want a number of writes from 1 to 100000", *raw.commitMax)
	} else {
		c.store.CommitMax = n
	}
	if n, err := strconv.Atoi(*raw.ownerProcs); err != nil || n < 0 || n > 1024 {
		return fmt.Errorf("OWNER_GOMAXPROCS (-owner-gomaxprocs) %q: want a number of Ps from 0 (unchanged) to 1024", *raw.ownerProcs)
	} else {
		c.store.OwnerProcs = n
	}
	if n, err := strconv.Atoi(*raw.loops); err != nil || n < 0 || n > 1024 {
		return fmt.Errorf("LOOPS (-loops) %q: want a number of event loops from 0 (one per GOMAXPROCS) to 1024", *raw.loops)
	} else {
		c.loops = n
	}
	if n, err := strconv.Atoi(*raw.maxConns); err != nil || n < 0 || n > 1<<24 {
		return fmt.Errorf("MAX_CONNS (-max-conns) %q: want a number of connections from 1 to %d, or 0 for the descriptor limit less %d", *raw.maxConns, 1<<24, http1.DescriptorReserve)
	} else {
		c.maxConns = n
	}
	if n, err := strconv.ParseInt(*raw.mmap, 10, 64); err != nil || n < 0 {
		return fmt.Errorf("SQLITE_MMAP_SIZE (-mmap-size) %q: want a number of bytes >= 0 (0: no mmap)", *raw.mmap)
	} else if c.store.MmapSize = n; n == 0 {
		c.store.MmapSize = -1 // feed.Options: negative is none, zero the default
	}
	return nil
}

// parseSecretAndAddr reads the JWT secret and the address to bind, and checks that the
// database, the secret and the port are usable.
func (c *serveConfig) parseSecretAndAddr(raw serveFlags, getenv func(string) string) error {
	secret, err := readSecret(getenv)
	if err != nil {
		return err
	}
	c.secret = secret
	c.addr = net.JoinHostPort(*raw.host, *raw.port)
	if c.products == "" && c.db != "" {
		c.products = defaultProductsPath(c.db)
	}
	if c.db == "" {
		return errors.New("SQLITE_PATH is not set: point it (or -db) at a copy of the seed database; `worker seed -db PATH` writes one")
	}
	if c.secret == "" {
		return errors.New("JWT_SECRET is empty: set it (or JWT_SECRET_FILE, a file holding it) to the HS256 secret of the tokens (the challenge uses twelve-dollar-challenge)")
	}
	if p, err := strconv.Atoi(*raw.port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("PORT %q: want a number from 0 to 65535", *raw.port)
	}
	return nil
}

// parseSupervisorEnv reads what a supervisor passes in the environment: the slot, the
// inherited socket, the channel's descriptor and the rendezvous of adoption.
func (c *serveConfig) parseSupervisorEnv(getenv func(string) string) error {
	if v := getenv(ipc.EnvWorkerID); v != "" {
		id, err := strconv.Atoi(v)
		if err != nil || id < 0 {
			return fmt.Errorf("%s %q: want a slot index >= 0", ipc.EnvWorkerID, v)
		}
		c.workerID = id
	}
	if v := getenv(ipc.EnvListenFDs); v != "" {
		if v != "1" {
			return fmt.Errorf("%s=%s: a worker serves exactly one inherited socket", ipc.EnvListenFDs, v)
		}
		if p := getenv(ipc.EnvListenPID); p != "" && p != strconv.Itoa(os.Getpid()) {
			return fmt.Errorf("%s=%s is not this process (%d): the socket was meant for another", ipc.EnvListenPID, p, os.Getpid())
		}
		c.inherited = true
	}
	if v := getenv(ipc.EnvFD); v != "" {
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return fmt.Errorf("%s %q: want a descriptor number >= 3", ipc.EnvFD, v)
		}
		c.ipcFD = fd
	}
	if c.adopt = getenv(ipc.EnvAdopt); c.adopt != "" {
		c.adoptWait = ipc.AdoptWait(getenv(ipc.EnvAdoptWait))
	}
	return nil
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
