// Package frontproxy puts nginx in front of the workers, as the $12 Server Challenge and
// the $6-server article run them: it fills in the templates of configs/nginx (front: a
// keep-alive proxy; cache: plus a ten-second micro-cache on the rendered page; static: plus
// /static/ served from disk) and runs the system's nginx in the foreground on a private
// prefix directory that holds its pid file, logs, temp files and cache.
//
// It exists so that tests and benchmarks can start and stop a real nginx without root-owned
// state. It is not a way to deploy nginx: a production front uses the distribution's layout,
// its own user (www-data) and a systemd unit.
//
// The templates' placeholders are @LISTEN@, @UPSTREAM@, @STATIC_ROOT@, @WORKER_PROCESSES@,
// @WORKER_CONNECTIONS@ and @RLIMIT_NOFILE@; every path in them is relative to the prefix
// (nginx -p). configs/nginx/nginx.sh does the same substitution for `make nginx`.
package frontproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults of Params.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultUpstream          = "127.0.0.1:3000"
	DefaultWorkerConnections = 16384
	DefaultRlimitNofile      = 65535
)

// Params fill a template's placeholders.
type Params struct {
	// Listen is the address nginx listens on (@LISTEN@). Default DefaultListen; Start
	// picks a free port on 127.0.0.1 instead when it is empty.
	Listen string
	// Upstream is the cluster's HOST:PORT (@UPSTREAM@). Default DefaultUpstream.
	Upstream string
	// StaticRoot is the absolute directory served at /static/ (@STATIC_ROOT@). Required
	// only by templates that use it (static.conf): the repository's internal/shop/static.
	StaticRoot string
	// WorkerProcesses is nginx's worker_processes. 0: "auto" (one per CPU).
	WorkerProcesses int
	// WorkerConnections is worker_connections: client and upstream connections together,
	// per worker process. Default DefaultWorkerConnections.
	WorkerConnections int
	// RlimitNofile is worker_rlimit_nofile, the descriptor limit each nginx worker sets
	// itself. Default DefaultRlimitNofile. Above the hard limit it needs CAP_SYS_RESOURCE;
	// without it nginx logs an alert and keeps the old limit.
	RlimitNofile int
}

var placeholder = regexp.MustCompile(`@[A-Z_]+@`)

// Render fills tmpl's placeholders from p. A placeholder Render does not know, or
// @STATIC_ROOT@ with no absolute StaticRoot, is an error naming it.
func Render(tmpl []byte, p Params) ([]byte, error) {
	wp := "auto"
	if p.WorkerProcesses > 0 {
		wp = strconv.Itoa(p.WorkerProcesses)
	}
	values := map[string]string{
		"@LISTEN@":             or(p.Listen, DefaultListen),
		"@UPSTREAM@":           or(p.Upstream, DefaultUpstream),
		"@WORKER_PROCESSES@":   wp,
		"@WORKER_CONNECTIONS@": strconv.Itoa(orInt(p.WorkerConnections, DefaultWorkerConnections)),
		"@RLIMIT_NOFILE@":      strconv.Itoa(orInt(p.RlimitNofile, DefaultRlimitNofile)),
	}
	if p.StaticRoot != "" {
		if !filepath.IsAbs(p.StaticRoot) {
			return nil, fmt.Errorf("render nginx config: StaticRoot %q is not absolute (nginx would resolve it against its prefix)", p.StaticRoot)
		}
		values["@STATIC_ROOT@"] = filepath.Clean(p.StaticRoot)
	}
	var err error
	out := placeholder.ReplaceAllFunc(tmpl, func(m []byte) []byte {
		v, ok := values[string(m)]
		if !ok {
			if err == nil {
				if string(m) == "@STATIC_ROOT@" {
					err = errors.New("render nginx config: the template serves @STATIC_ROOT@: set Params.StaticRoot")
				} else {
					err = fmt.Errorf("render nginx config: unknown placeholder %s", m)
				}
			}
			return m
		}
		return []byte(v)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func orInt(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// ErrNotInstalled is LookPath's error when there is no nginx binary.
var ErrNotInstalled = errors.New("nginx is not installed (apt-get install nginx-light, or nginx)")

// LookPath returns the nginx binary: nginx on $PATH, else /usr/sbin/nginx (Debian's, which
// is not on a non-root user's PATH).
func LookPath() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat("/usr/sbin/nginx"); err == nil && fi.Mode()&0o111 != 0 {
		return "/usr/sbin/nginx", nil
	}
	return "", ErrNotInstalled
}

// Version returns the version of the nginx binary bin ("1.22.1").
func Version(bin string) (string, error) {
	out, err := exec.Command(bin, "-v").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("run %s -v: %w (%s)", bin, err, bytes.TrimSpace(out))
	}
	v, ok := parseVersion(string(out))
	if !ok {
		return "", fmt.Errorf("read nginx version: no nginx/X.Y.Z in %q", bytes.TrimSpace(out))
	}
	return v, nil
}

// parseVersion finds "nginx/X.Y.Z" in the output of nginx -v.
func parseVersion(s string) (string, bool) {
	_, rest, ok := strings.Cut(s, "nginx/")
	if !ok {
		return "", false
	}
	end := 0
	for end < len(rest) && (rest[end] == '.' || rest[end] >= '0' && rest[end] <= '9') {
		end++
	}
	v := rest[:end]
	if _, ok := versionParts(v); !ok {
		return "", false
	}
	return v, true
}

// versionParts splits "X.Y.Z" into numbers.
func versionParts(v string) ([3]int, bool) {
	var n [3]int
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return n, false
	}
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 || p == "" || p[0] == '+' {
			return n, false
		}
		n[i] = x
	}
	return n, true
}

// atLeast reports whether version v is at least min (both "X.Y.Z").
func atLeast(v, min string) bool {
	a, ok1 := versionParts(v)
	b, ok2 := versionParts(min)
	if !ok1 || !ok2 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

// Options configure Start.
type Options struct {
	// Binary is the nginx executable. Default: LookPath.
	Binary string
	// Prefix is the private directory for the config, pid file, logs, temp files and
	// cache. Default: a new temporary directory, removed by Stop.
	Prefix string
	// Params fill the template. An empty Listen means a free port on 127.0.0.1.
	Params Params
	// Stderr receives nginx's own stderr (nil: discarded); its error log is the file
	// error.log in Prefix, which ErrorLog reads.
	Stderr io.Writer
	// StartTimeout bounds the wait for the listening socket. Default 10 s.
	StartTimeout time.Duration
	// Wrap rewrites nginx's command line before it starts, e.g. to run it under a wrapper
	// that pins it to some cores and execs nginx (taskset, `ceiling pin`): the affinity is
	// set before nginx forks, so every worker inherits it. The wrapper must exec nginx,
	// so that Pid stays the master's and the stop signals reach it. Default: none.
	Wrap func(argv []string) []string
}

// Proxy is a running nginx, master process in the foreground.
type Proxy struct {
	cmd        *exec.Cmd
	done       chan struct{} // closed when cmd.Wait returned
	waitErr    error
	addr       string
	prefix     string
	ownsPrefix bool
}

// Start renders tmpl with opt.Params into Prefix/nginx.conf and runs nginx with it in the
// foreground (daemon off), returning once the listening socket accepts connections. ctx
// ending stops nginx as Stop does. The caller must call Stop.
//
// When the master runs as root, nginx would switch its workers to the user nobody, who can
// neither enter a private prefix under a 0700 temporary directory nor read the checkout;
// Start keeps them root ("user root;"). A non-root master keeps its own uid anyway.
func Start(ctx context.Context, tmpl []byte, opt Options) (*Proxy, error) {
	bin := opt.Binary
	if bin == "" {
		var err error
		if bin, err = LookPath(); err != nil {
			return nil, err
		}
	}
	ver, err := Version(bin)
	if err != nil {
		return nil, err
	}
	prefix, owns := opt.Prefix, false
	if prefix == "" {
		if prefix, err = os.MkdirTemp("", "frontproxy-"); err != nil {
			return nil, fmt.Errorf("create nginx prefix: %w", err)
		}
		owns = true
	}
	if prefix, err = filepath.Abs(prefix); err != nil {
		return nil, fmt.Errorf("resolve nginx prefix: %w", err)
	}
	// A port we pick can be taken between our check and nginx's bind: try a few.
	pick := opt.Params.Listen == ""
	for attempt := 0; ; attempt++ {
		p := opt.Params
		if pick {
			if p.Listen, err = freePort(); err != nil {
				break
			}
		}
		var px *Proxy
		px, err = start(ctx, bin, ver, prefix, tmpl, p, opt)
		if err == nil {
			px.ownsPrefix = owns
			return px, nil
		}
		if !pick || attempt == 2 || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	if owns {
		os.RemoveAll(prefix)
	}
	return nil, err
}

func start(ctx context.Context, bin, ver, prefix string, tmpl []byte, p Params, opt Options) (*Proxy, error) {
	conf, err := Render(tmpl, p)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return nil, fmt.Errorf("create nginx prefix: %w", err)
	}
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		return nil, fmt.Errorf("write nginx config: %w", err)
	}
	errLog := filepath.Join(prefix, "error.log")
	os.Remove(errLog) // this run's lines only, so a failure shows its own cause
	globals := "daemon off;"
	if os.Geteuid() == 0 {
		globals += " user root;"
	}
	args := []string{"-p", prefix + "/", "-c", confPath, "-g", globals}
	if atLeast(ver, "1.19.5") { // -e: where nginx logs before it has read error_log
		args = append(args, "-e", errLog)
	}
	argv := append([]string{bin}, args...)
	if opt.Wrap != nil {
		argv = opt.Wrap(argv)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = prefix
	cmd.Stdout = opt.Stderr
	cmd.Stderr = opt.Stderr
	// ctx ending is a graceful stop (SIGQUIT: finish requests in flight), forced after
	// WaitDelay.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	px := &Proxy{cmd: cmd, done: make(chan struct{}), addr: p.Listen, prefix: prefix}
	go func() {
		px.waitErr = cmd.Wait()
		close(px.done)
	}()

	timeout := opt.StartTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-px.done:
			return nil, fmt.Errorf("nginx exited at start (%v): %s", px.waitErr, px.tail(errLog, 5))
		default:
		}
		// nginx opens its listeners before it installs its signal handlers: a SIGQUIT
		// in between kills it outright, so ready is listening and catching SIGQUIT.
		c, err := net.DialTimeout("tcp", p.Listen, time.Second)
		if err == nil {
			c.Close()
			if catches(cmd.Process.Pid, syscall.SIGQUIT) {
				return px, nil
			}
		}
		if time.Now().After(deadline) {
			px.Stop()
			return nil, fmt.Errorf("nginx not listening on %s after %v: %s", p.Listen, timeout, px.tail(errLog, 5))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// catches reports whether process pid has a handler installed for sig, from the SigCgt
// mask in /proc/PID/status. Where /proc cannot say, it reports true: the dial alone then
// decides, as before.
func catches(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return true
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return true
}

// freePort returns 127.0.0.1:PORT with a port the kernel just handed out and released.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a port for nginx: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

func (px *Proxy) tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no error log: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Addr is the address nginx listens on.
func (px *Proxy) Addr() string { return px.addr }

// URL is "http://" + Addr.
func (px *Proxy) URL() string { return "http://" + px.addr }

// Prefix is the private directory (config, pid file, error.log, tmp/, cache/).
func (px *Proxy) Prefix() string { return px.prefix }

// Pid is the master process's pid.
func (px *Proxy) Pid() int { return px.cmd.Process.Pid }

// Argv is the command line nginx was started with (after Options.Wrap).
func (px *Proxy) Argv() []string { return append([]string(nil), px.cmd.Args...) }

// ErrorLog returns the error log written so far.
func (px *Proxy) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(px.prefix, "error.log"))
	return string(b)
}

// Stop asks nginx to finish the requests in flight and exit (SIGQUIT), waits for it, kills
// it if it is still there after 10 s, and removes the prefix if Start created it. It
// returns nginx's exit error; calling it again returns the same.
func (px *Proxy) Stop() error {
	select {
	case <-px.done:
	default:
		px.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-px.done:
		case <-time.After(10 * time.Second):
			px.cmd.Process.Kill()
			<-px.done
		}
	}
	if px.ownsPrefix {
		os.RemoveAll(px.prefix)
	}
	if px.waitErr != nil {
		return fmt.Errorf("nginx exit: %w", px.waitErr)
	}
	return nil
}
