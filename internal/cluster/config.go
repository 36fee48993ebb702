package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/onehost/onehost/internal/steering"
)

// Config is the cluster's configuration. Field names follow PM2's ecosystem file, so a PM2
// user recognises them; the zero value of every field means its default.
type Config struct {
	// ExecMode is PM2's exec_mode: ExecCluster (the default, "") runs every instance on
	// the shared port's sockets; ExecFork runs each instance as a plain process with no
	// socket of ours (a background job, or a program that binds a port of its own, as
	// PM2's fork mode): no listen, no steering, and a reload is a restart (each process
	// stopped before its successor starts, since two copies may not fit at once).
	ExecMode string `yaml:"exec_mode"`
	// Instances is the number of worker slots: InstancesMax (0, "max") for one per CPU the
	// process may use (runtime.GOMAXPROCS(0), which follows the cgroup limit, unlike PM2's
	// host CPU count), -1 for all but one, or N. Default max; in fork mode 1 (PM2's
	// default there: a background program is one process unless asked for more).
	Instances Instances `yaml:"instances"`
	// Listen is the HOST:PORT every slot's socket binds. Port 0 picks a free port once and
	// all slots share it. Default 127.0.0.1:3000.
	Listen string `yaml:"listen"`
	// Command is the worker program and its arguments. Empty: the caller decides (the
	// supervisor command runs the worker binary beside itself).
	Command []string `yaml:"command"`
	// Cwd is the workers' working directory (PM2's cwd). Default: Options.Dir, else the
	// supervisor's.
	Cwd string `yaml:"cwd"`
	// Env is added to the environment every worker gets (after the supervisor's own).
	Env map[string]string `yaml:"env"`
	// SelfBind makes each worker bind Listen itself (HOST and PORT in its environment, ipc
	// at fd 3) instead of inheriting a socket, for programs that cannot take one. It costs
	// what the inherited sockets exist to avoid: a worker's accept queue is reset whenever
	// it exits (crash, reload, scale-down, memory restart), unless tcp_migrate_req moves it.
	// Needs a fixed port. Default false.
	SelfBind bool `yaml:"self_bind"`
	// Steering chooses which slot's socket gets each new connection: SteeringAuto (the
	// default, "") deals them round robin over the slots whose workers are online, through
	// an eBPF program (internal/steering), where the kernel allows one, and falls back to the
	// kernel's hash of the connection's addresses otherwise; SteeringHash always uses the
	// hash; SteeringRoundRobin insists on the program and fails to start without it. Not
	// with SelfBind (the workers own their sockets): the hash.
	Steering string `yaml:"steering"`
	// WorkerGOMAXPROCS is the GOMAXPROCS each worker gets. Default 1: one process per core.
	WorkerGOMAXPROCS int `yaml:"worker_gomaxprocs"`
	// WaitReady (PM2's wait_ready) makes a new worker `launching` until it says it is ready
	// (readiness.go: our ipc, sd_notify's READY=1, or Node's process.send('ready')); after
	// listen_timeout without a word it is online anyway, as in PM2. Default false: a worker
	// is online once started, unless the program is known to signal readiness (an earlier
	// worker of this cluster did), in which case it is always waited for, and a new worker
	// that never signals is killed (at start) or aborts the reload (the previous generation
	// keeps serving). nil: the default; `supervisor run` makes it true when it picks the
	// program itself (its own worker).
	WaitReady *bool `yaml:"wait_ready"`
	// KillSignal is what stops a worker that does not speak our ipc (PM2's kill_signal):
	// gunicorn drains on SIGTERM and stops at once on SIGINT, PM2's default. Default
	// SIGTERM, systemd's. Workers that speak ipc are asked to drain over it instead.
	KillSignal string `yaml:"kill_signal"`
	// ShutdownWithMessage (PM2's shutdown_with_message) stops a Node worker by sending it
	// the message "shutdown" over its Node IPC channel instead of KillSignal. Default false.
	ShutdownWithMessage bool `yaml:"shutdown_with_message"`
	// KillTimeout is how long a draining worker may take before SIGKILL. Default 1.6 s.
	KillTimeout Duration `yaml:"kill_timeout"`
	// ListenTimeout bounds the wait for a new worker's ready message. Default 10 s, not
	// PM2's 3 s: a reload aborted for a slow start needs an operator, while waiting longer
	// costs nothing since the old worker keeps serving meanwhile.
	ListenTimeout Duration `yaml:"listen_timeout"`
	// RestartDelay is a fixed delay before restarting a crashed worker, used when
	// ExpBackoffRestartDelay is not set. Default 0.
	RestartDelay Duration `yaml:"restart_delay"`
	// ExpBackoffRestartDelay is the first delay of the exponential restart backoff (×1.5 per
	// consecutive crash, capped at 15 s, reset once a worker stayed up 30 s). Default 100 ms
	// when RestartDelay is not set either.
	ExpBackoffRestartDelay Duration `yaml:"exp_backoff_restart_delay"`
	// MinUptime: a worker that exits sooner counts as an unstable start. Default 1 s.
	MinUptime Duration `yaml:"min_uptime"`
	// MaxRestarts: more consecutive unstable starts than this and the slot is errored (no
	// more restarts). Default 16.
	MaxRestarts int `yaml:"max_restarts"`
	// MaxMemoryRestart: a worker whose RSS exceeds it is reloaded gracefully. Default 0, off.
	MaxMemoryRestart ByteSize `yaml:"max_memory_restart"`
	// HeartbeatTimeout: a worker that answers no stats request for this long (stopped,
	// deadlocked) is killed and restarted. Default 5 s.
	HeartbeatTimeout Duration `yaml:"heartbeat_timeout"`
	// WatchdogSec is systemd's WatchdogSec= for the workers: each gets WATCHDOG_USEC, and one
	// that has sent sd_notify's WATCHDOG=1 once and then sends none for this long is killed
	// and restarted, as a missed heartbeat (at most one per heartbeat_timeout, none when all
	// are silent). Default 0: no watchdog; a worker's WATCHDOG=1 then only counts as heard.
	WatchdogSec Duration `yaml:"watchdog_sec"`
	// AdoptWait is how long a worker that lost its supervisor (killed, or upgrading in
	// place) keeps serving while it waits for the next one to adopt it, before it drains
	// and exits (only workers that rejoin, as cmd/worker does: see Options.Adopt). Long enough
	// for systemd's Restart= or a person to start the supervisor again; short enough that
	// an abandoned cluster does not serve unwatched for long. Default 30 s.
	AdoptWait Duration `yaml:"adopt_wait"`
	// StatsInterval is how often workers are asked for counters and /proc is sampled.
	// Default 1 s.
	StatsInterval Duration `yaml:"stats_interval"`
	// AutoRestart is PM2's autorestart: false leaves a worker that exited, crashed or not,
	// stopped (its slot shown StateStopped) until a reload or restart starts it again.
	// Default true (nil).
	AutoRestart *bool `yaml:"autorestart"`
	// StopExitCodes (PM2's stop_exit_codes): a worker that exits with one of these codes
	// is left stopped, as under autorestart: false; other exits restart it. Default: none.
	StopExitCodes []int `yaml:"stop_exit_codes"`
	// Watch is PM2's watch: a change to a file under these paths (relative to cwd) rolls
	// a reload, one worker at a time (watch.go). `true` is the app's directory, `false`
	// or none is off; a path or a list of paths. Default: off.
	Watch WatchPaths `yaml:"watch"`
	// IgnoreWatch (PM2's ignore_watch) are glob patterns (path.Match) of paths under Watch
	// whose changes do not count, matched against the path relative to the watched one,
	// each of its parent directories and its base name. Dotfiles and node_modules are never
	// watched (PM2's default). Default: none.
	IgnoreWatch []string `yaml:"ignore_watch"`
	// WatchDelay (PM2's watch_delay) is how long the reload waits after a change; changes
	// meanwhile join it, and a change during a reload rolls one more after it. Default 0.
	WatchDelay Duration `yaml:"watch_delay"`
	// CronRestart (PM2's cron_restart) rolls a reload (a restart in fork mode) at the times
	// of this cron expression (internal/cron: 5 fields, or 6 with seconds first), in the
	// supervisor's time zone. Default: none.
	CronRestart string `yaml:"cron_restart"`
	// InstanceVar (PM2's instance_var) names the variable that gives each worker its slot
	// index. Default NODE_APP_INSTANCE, given to Node programs (as PM2's cluster mode gives
	// it); a name set here is given to every program. (ONEHOST_WORKER_ID always is.)
	InstanceVar string `yaml:"instance_var"`
	// IncrementVar (PM2's increment_var) names a variable each worker gets as its value in
	// env (0 if unset) plus its slot index: PORT 4000 is 4000, 4001, ... in fork mode.
	// Default: none.
	IncrementVar string `yaml:"increment_var"`
	// LogDateFormat (PM2's log_date_format, in day.js tokens: YYYY-MM-DD HH:mm:ss Z)
	// prefixes every line a worker writes with its time and ": ", as PM2 does; PM2's
	// `time: true` is DefaultLogDateFormat. Default: none.
	LogDateFormat string `yaml:"log_date_format"`
	// Agent is the HOST:PORT where the supervisor answers HAProxy's agent-check (up with a
	// weight, drain, down: cmd/supervisor's agent). It is the supervisor's, not a cluster's:
	// `supervisor run -agent` sets it too. Default: none.
	Agent string `yaml:"agent"`
	// Fleet makes this host one of a fleet sharing one database (fleetconfig.go). It is the
	// supervisor's, not a cluster's. Default: none.
	Fleet FleetConfig `yaml:"fleet"`
}

// Defaults.
const (
	DefaultListen           = "127.0.0.1:3000"
	DefaultKillTimeout      = 1600 * time.Millisecond
	DefaultListenTimeout    = 10 * time.Second
	DefaultExpBackoff       = 100 * time.Millisecond
	DefaultMinUptime        = time.Second
	DefaultMaxRestarts      = 16
	DefaultHeartbeatTimeout = 5 * time.Second
	DefaultStatsInterval    = time.Second
	DefaultAdoptWait        = 30 * time.Second
	// MaxBackoff caps the exponential restart delay (as PM2 does).
	MaxBackoff = 15 * time.Second
	// BackoffReset: a worker up this long resets its slot's backoff.
	BackoffReset = 30 * time.Second
	// MaxInstances bounds Instances; more processes than this on one host is a typo.
	MaxInstances = 1024
)

// Exec modes (Config.ExecMode), as PM2 spells them.
const (
	ExecCluster = "cluster"
	ExecFork    = "fork"
)

// Fork reports whether c runs in fork mode (no socket of ours).
func (c Config) Fork() bool { return c.ExecMode == ExecFork }

// autoRestart is AutoRestart's value, true when unset (PM2's default).
func (c Config) autoRestart() bool { return c.AutoRestart == nil || *c.AutoRestart }

// waitReady is WaitReady's value, false when unset.
func (c Config) waitReady() bool { return c.WaitReady != nil && *c.WaitReady }

// Steering modes (Config.Steering), as internal/steering names them.
const (
	SteeringAuto       = steering.ModeAuto
	SteeringHash       = steering.ModeHash
	SteeringRoundRobin = steering.ModeRoundRobin
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.ExecMode == "" {
		c.ExecMode = ExecCluster
	}
	if c.Fork() && c.Instances == InstancesMax {
		c.Instances = 1
	}
	if c.Steering == "" {
		c.Steering = SteeringAuto
	}
	if c.Listen == "" && !c.Fork() {
		c.Listen = DefaultListen
	}
	if c.KillSignal == "" {
		c.KillSignal = "SIGTERM"
	}
	if c.WorkerGOMAXPROCS == 0 {
		c.WorkerGOMAXPROCS = 1
	}
	if c.KillTimeout == 0 {
		c.KillTimeout = Duration(DefaultKillTimeout)
	}
	if c.ListenTimeout == 0 {
		c.ListenTimeout = Duration(DefaultListenTimeout)
	}
	if c.RestartDelay == 0 && c.ExpBackoffRestartDelay == 0 {
		c.ExpBackoffRestartDelay = Duration(DefaultExpBackoff)
	}
	if c.MinUptime == 0 {
		c.MinUptime = Duration(DefaultMinUptime)
	}
	if c.MaxRestarts == 0 {
		c.MaxRestarts = DefaultMaxRestarts
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = Duration(DefaultHeartbeatTimeout)
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = Duration(DefaultStatsInterval)
	}
	if c.AdoptWait == 0 {
		c.AdoptWait = Duration(DefaultAdoptWait)
	}
	return c
}

// Validate reports the first field out of range, naming the field (as spelled in the
// YAML file) and the allowed values.
func (c Config) Validate() error {
	switch c.ExecMode {
	case "", ExecCluster:
	case ExecFork:
		// Fork mode holds no socket: settings that only a socket of ours gives meaning to
		// are mistakes, not defaults to ignore.
		switch {
		case c.Listen != "":
			return fmt.Errorf("listen: %q: exec_mode: fork gets no socket from the supervisor (the program binds its own port, if any): drop listen, or use exec_mode: cluster", c.Listen)
		case c.SelfBind:
			return errors.New("self_bind: exec_mode: fork binds nothing for the program already: drop self_bind")
		case c.Steering != "" && c.Steering != SteeringAuto:
			return fmt.Errorf("steering: %q: exec_mode: fork has no shared socket to steer: drop steering", c.Steering)
		}
	default:
		return fmt.Errorf("exec_mode: %q: want cluster (default) or fork", c.ExecMode)
	}
	if c.Instances < -1 || c.Instances > MaxInstances {
		return fmt.Errorf("instances: %d is out of range: want max, -1 or 1 to %d", int(c.Instances), MaxInstances)
	}
	if c.Listen != "" {
		host, port, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return fmt.Errorf("listen: %q is not HOST:PORT: %w", c.Listen, err)
		}
		_ = host
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return fmt.Errorf("listen: port %q is out of range: want 0 to 65535", port)
		}
	}
	if c.Agent != "" {
		_, port, err := net.SplitHostPort(c.Agent)
		if err != nil {
			return fmt.Errorf("agent: %q is not HOST:PORT (say agent: 0.0.0.0:9777, the port HAProxy's agent-port names): %w", c.Agent, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return fmt.Errorf("agent: port %q is out of range: want 0 to 65535 (HAProxy's agent-port)", port)
		}
	}
	if c.SelfBind {
		l := c.Listen
		if l == "" {
			l = DefaultListen
		}
		if _, port, err := net.SplitHostPort(l); err != nil || port == "0" {
			return fmt.Errorf("self_bind: needs a fixed port in listen (got %q): each worker binds it on its own", c.Listen)
		}
	}
	for i, a := range c.Command {
		if i == 0 && a == "" {
			return errors.New("command: the program name is empty")
		}
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("env: %q is not a variable name", k)
		}
	}
	if c.KillSignal != "" {
		if _, err := parseSignal(c.KillSignal); err != nil {
			return fmt.Errorf("kill_signal: %w: want a name such as SIGTERM (default), SIGINT or SIGQUIT", err)
		}
	}
	switch c.Steering {
	case "", SteeringAuto, SteeringHash, SteeringRoundRobin:
		if c.SelfBind && c.Steering == SteeringRoundRobin {
			return fmt.Errorf("steering: %s needs the supervisor's sockets, and self_bind makes the workers bind their own: set steering: auto or hash, or self_bind: false", SteeringRoundRobin)
		}
	default:
		return fmt.Errorf("steering: %q is not a steering mode: want %s (default), %s or %s", c.Steering, SteeringAuto, SteeringHash, SteeringRoundRobin)
	}
	if c.WorkerGOMAXPROCS < 0 || c.WorkerGOMAXPROCS > MaxInstances {
		return fmt.Errorf("worker_gomaxprocs: %d is out of range: want 1 to %d", c.WorkerGOMAXPROCS, MaxInstances)
	}
	durs := []struct {
		name     string
		v        Duration
		min, max time.Duration
	}{
		{"kill_timeout", c.KillTimeout, 0, 10 * time.Minute},
		{"listen_timeout", c.ListenTimeout, 0, 10 * time.Minute},
		{"restart_delay", c.RestartDelay, 0, 10 * time.Minute},
		{"exp_backoff_restart_delay", c.ExpBackoffRestartDelay, 0, MaxBackoff},
		{"min_uptime", c.MinUptime, 0, time.Hour},
		{"heartbeat_timeout", c.HeartbeatTimeout, 0, 10 * time.Minute},
		{"watchdog_sec", c.WatchdogSec, 0, time.Hour},
		{"stats_interval", c.StatsInterval, 0, time.Minute},
		{"adopt_wait", c.AdoptWait, 0, time.Hour},
		{"watch_delay", c.WatchDelay, 0, 10 * time.Minute},
	}
	for _, d := range durs {
		if time.Duration(d.v) < d.min || time.Duration(d.v) > d.max {
			return fmt.Errorf("%s: %v is out of range: want 0 (default) to %v", d.name, time.Duration(d.v), d.max)
		}
	}
	if d := c.WithDefaults(); d.HeartbeatTimeout < 2*d.StatsInterval {
		// One late answer must not cost a worker its life.
		return fmt.Errorf("heartbeat_timeout: %v is out of range: want at least twice stats_interval (%v)",
			d.HeartbeatTimeout.D(), d.StatsInterval.D())
	}
	if err := c.validatePM2(); err != nil {
		return err
	}
	if c.MaxRestarts < 0 || c.MaxRestarts > 1_000_000 {
		return fmt.Errorf("max_restarts: %d is out of range: want 0 (default 16) to 1000000", c.MaxRestarts)
	}
	if c.MaxMemoryRestart != 0 && (c.MaxMemoryRestart < 1<<20 || c.MaxMemoryRestart > 1<<40) {
		return fmt.Errorf("max_memory_restart: %d bytes is out of range: want 0 (off) or 1M to 1T", int64(c.MaxMemoryRestart))
	}
	return nil
}

// LoadConfig reads and validates a YAML configuration file. Unknown fields are refused, so
// a misspelt option is not silently ignored.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("open config: %w", err)
	}
	defer f.Close()
	c, err := ParseConfig(f)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and validates YAML configuration. An empty document is the zero
// Config (all defaults).
func ParseConfig(r io.Reader) (Config, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		var doc yaml.Node
		if yaml.Unmarshal(b, &doc) == nil {
			if named := nameField(&doc, err); named != err {
				return Config{}, named
			}
		}
		return Config{}, fmt.Errorf("decode config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Instances is a worker count as PM2 spells it: "max" (or 0), -1 for all CPUs but one, or N.
type Instances int

// InstancesMax means one worker per usable CPU.
const InstancesMax Instances = 0

// ParseInstances parses "max", "-1" or a positive count.
func ParseInstances(s string) (Instances, error) {
	if s == "max" {
		return InstancesMax, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n > MaxInstances {
		return 0, fmt.Errorf("instances: %q is out of range: want max, -1 or 1 to %d", s, MaxInstances)
	}
	return Instances(n), nil
}

// Count resolves the value against the CPUs this process may use.
func (n Instances) Count() int {
	procs := runtime.GOMAXPROCS(0)
	switch {
	case n == InstancesMax:
		return procs
	case n == -1:
		return max(1, procs-1)
	}
	return int(n)
}

// UnmarshalYAML accepts "max" or an integer.
func (n *Instances) UnmarshalYAML(v *yaml.Node) error {
	if v.Kind != yaml.ScalarNode {
		return fmt.Errorf("instances: want max, -1 or a number (line %d)", v.Line)
	}
	p, err := ParseInstances(v.Value)
	if err != nil {
		return err
	}
	*n = p
	return nil
}

// Duration is a time.Duration written as a Go duration ("1.6s", "500ms") or, as in PM2,
// an integer number of milliseconds.
type Duration time.Duration

// durationFix is what every duration error tells to write instead.
const durationFix = "write a duration such as 5s, 1.5s or 500ms, or a number of milliseconds (1500), as PM2 takes"

// UnmarshalYAML accepts "1.6s" or 1600 (milliseconds).
func (d *Duration) UnmarshalYAML(v *yaml.Node) error {
	bad := func(msg string) error { return &valueError{line: v.Line, col: v.Column, msg: msg, fix: durationFix} }
	if v.Kind != yaml.ScalarNode {
		return bad("not a duration")
	}
	if ms, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
		if ms < 0 || ms > int64(24*time.Hour/time.Millisecond) {
			return bad(fmt.Sprintf("%d ms is out of range: want 0 to %d (24h)", ms, int64(24*time.Hour/time.Millisecond)))
		}
		*d = Duration(time.Duration(ms) * time.Millisecond)
		return nil
	}
	p, err := time.ParseDuration(v.Value)
	if err != nil {
		return bad(fmt.Sprintf("%q is not a duration", v.Value))
	}
	if p < 0 {
		return bad(fmt.Sprintf("%v is negative", p))
	}
	*d = Duration(p)
	return nil
}

// valueError is a value's error from its own UnmarshalYAML, which sees the value but not
// the field it was given for; nameField puts the field's name in front, as every other
// config error has it.
type valueError struct {
	line, col int
	msg, fix  string
}

func (e *valueError) Error() string { return fmt.Sprintf("line %d: %s: %s", e.line, e.msg, e.fix) }

// nameField returns err with the field named, when it is a valueError of a value of doc's
// (a mapping, or a document of one, at any depth): "kill_timeout: "soon" is not a duration
// (line 3): write ...". Any other error is returned as it is.
func nameField(doc *yaml.Node, err error) error {
	var ve *valueError
	if !errors.As(err, &ve) {
		return err
	}
	var find func(n *yaml.Node) string
	find = func(n *yaml.Node) string {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if v := n.Content[i+1]; v.Line == ve.line && v.Column == ve.col {
					return n.Content[i].Value
				}
			}
		}
		for _, c := range n.Content {
			if k := find(c); k != "" {
				return k
			}
		}
		return ""
	}
	if key := find(doc); key != "" {
		return fmt.Errorf("%s: %s (line %d): %s", key, ve.msg, ve.line, ve.fix)
	}
	return err
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ByteSize is a size in bytes written as PM2 does: 300M, 1G, 512K or plain bytes.
type ByteSize int64

// ParseByteSize parses a byte count with an optional K, M or G suffix (powers of 1024).
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K', 'k':
			mult, t = 1<<10, t[:n-1]
		case 'M', 'm':
			mult, t = 1<<20, t[:n-1]
		case 'G', 'g':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<42)/mult {
		return 0, fmt.Errorf("%q is not a size such as 300M, 1G or a byte count", s)
	}
	return ByteSize(v * mult), nil
}

// UnmarshalYAML accepts 300M, 1G, 512K or a byte count.
func (b *ByteSize) UnmarshalYAML(v *yaml.Node) error {
	if v.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a size such as 300M", v.Line)
	}
	p, err := ParseByteSize(v.Value)
	if err != nil {
		return fmt.Errorf("max_memory_restart: %w", err)
	}
	*b = p
	return nil
}
