// Starting and stopping the sweep's peers as servers: PM2 (with and without
// @fastify/compress) and nginx, and the process helpers they need.

package ceiling

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/frontproxy"
)

// startPM2 runs `pm2 start heavy.js -i N --no-daemon` pinned to the server's cores, with
// a private PM2_HOME, and waits until its N workers run and the port answers.
//
// --no-daemon keeps PM2's God daemon in the process the sweep started instead of a
// detached one: it is the sweep's child, so it is waited for, dies with the sweep
// (Pdeathsig; its cluster workers exit when their channel to it closes), and its tree
// (God and its workers, which it forks and so pins along) is the server's CPU. A daemon
// would be reparented away from the sweep, and any pm2 command that finds no daemon starts
// one. The God's pid is also read from PM2_HOME/pm2.pid and sampled, in case a pm2
// version daemonizes anyway.
func (s *Sweeper) startPM2(ctx context.Context, srv *Server, dir string) (*Server, error) {
	return s.startPM2Script(ctx, srv, dir, s.peers.pm2Script, s.peers.pm2Dir)
}

// startPM2Script is startPM2 for script, run in workDir ("": the sweep's).
func (s *Sweeper) startPM2Script(ctx context.Context, srv *Server, dir, script, workDir string) (*Server, error) {
	home := filepath.Join(dir, "pm2")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("start pm2: %w", err)
	}
	addr, err := FreePort()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	env := []string{"PM2_HOME=" + home, "PORT=" + port}
	argv := []string{s.peers.pm2, "start", script, "-i", strconv.Itoa(srv.N), "--no-daemon"}
	if len(s.cfg.AppPM2Args) > 0 {
		argv = append(append(argv, "--"), s.cfg.AppPM2Args...)
	}
	if srv.CPUs != nil {
		argv = s.cfg.Pin(srv.CPUs, argv)
	}
	if err := s.spawn(srv, "pm2", workDir, argv, env); err != nil {
		return nil, err
	}
	srv.stop = func() error { return s.stopPM2(srv, home, script) }
	s.log.Info("pm2 started", zap.Int("n", srv.N), zap.Int("pid", srv.pid))

	ready := func() bool {
		god, _ := readPIDFile(filepath.Join(home, "pm2.pid"))
		if god <= 0 {
			return false
		}
		roots := []int{srv.pid}
		if god != srv.pid {
			roots = append(roots, god)
		}
		if len(processesRunning(processTree(roots), script)) < srv.N || !dialable(addr) {
			return false
		}
		srv.roots, srv.Addr = roots, addr
		return true
	}
	notReady := fmt.Sprintf("%d workers of %s not serving %s", srv.N, script, addr)
	if err := srv.waitReady(ctx, "pm2", notReady, ready); err != nil {
		return nil, err
	}
	return srv, nil
}

// stopPM2 runs `pm2 kill` against the private PM2_HOME while the God the sweep started
// still runs (it stops the workers and exits, and the sweep reaps it), kills it after
// 10 s, kills any worker of the peer's script still left, and removes PM2_HOME.
func (s *Sweeper) stopPM2(srv *Server, home, script string) error {
	workers := processesRunning(processTree(srv.sampled()), script)
	select {
	case <-srv.exited:
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		kill := exec.CommandContext(ctx, s.peers.pm2, "kill")
		kill.Env = append(append([]string(nil), s.cfg.Environ...), "PM2_HOME="+home)
		kill.Dir = home
		out, err := kill.CombinedOutput()
		cancel()
		if err != nil {
			s.log.Warn("pm2 kill", zap.Error(err), zap.String("output", Tail(out, 300)))
		}
		select {
		case <-srv.exited:
		case <-time.After(10 * time.Second):
			srv.cmd.Process.Kill()
			<-srv.exited
		}
	}
	// Only processes still running the script: a pid reused meanwhile is left alone.
	for _, pid := range processesRunning(workers, script) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	os.RemoveAll(home)
	var ee *exec.ExitError
	if srv.waitErr != nil && !errors.As(srv.waitErr, &ee) {
		return fmt.Errorf("stop pm2: %w", srv.waitErr)
	}
	return nil
}

// ansiEscape is a terminal colour sequence, as PM2 writes around its log lines.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// plain is b without terminal colours, for an error message.
func plain(b []byte) []byte { return ansiEscape.ReplaceAll(b, nil) }

// readPIDFile reads a pid file such as PM2_HOME/pm2.pid.
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read pid file: %w", err)
	}
	return parsePIDFile(b)
}

// parsePIDFile decodes a pid file: a positive decimal pid, surrounding space allowed.
func parsePIDFile(b []byte) (int, error) {
	s := string(bytes.TrimSpace(b))
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("parse pid file: %q is not a pid", s)
	}
	return pid, nil
}

// processesRunning are those of pids whose command line has arg as one of its arguments
// (not the program itself: PM2's workers are "node /path/heavy.js").
func processesRunning(pids []int, arg string) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && cmdlineHas(b, arg) {
			out = append(out, pid)
		}
	}
	return out
}

// cmdlineHas reports whether a /proc/PID/cmdline holds arg as an argument after the
// program. The arguments are NUL-separated, unless the process rewrote them for its
// title, as Node does for process.title (PM2 sets it): then they are one string of
// space-separated words padded with NULs. Words are compared, so arg must hold no space.
func cmdlineHas(cmdline []byte, arg string) bool {
	words := strings.FieldsFunc(string(cmdline), func(r rune) bool { return r == 0 || r == ' ' })
	return len(words) > 1 && slices.Contains(words[1:], arg)
}

// gzipOn is what ModeNginxGzip's template has in place of `gzip_static on;`: the page
// compressed per request at level 6, ours' default (nginx's own is 1), from 1 KiB as ours;
// text/html is always among gzip_types (naming it again draws a warning).
const gzipOn = `gzip_static off;
            gzip on;
            gzip_comp_level 6;
            gzip_min_length 1024;
            gzip_types application/json;`

// gzipTemplate makes ModeNginxGzip's template from the static one: gzip on in place of
// gzip_static on, all else the same, so the two nginx runs differ in that alone.
func (s *Sweeper) gzipTemplate() string {
	const static = "gzip_static on;"
	if bytes.Count(s.peers.nginxTmpl, []byte(static)) != 1 {
		return fmt.Sprintf("the nginx template has no single %q line to turn into gzip on", static)
	}
	s.peers.gzipTmpl = bytes.Replace(s.peers.nginxTmpl, []byte(static), []byte(gzipOn), 1)
	return ""
}

// compressScript is the program ModePM2Compress runs under PM2: the peer's heavy.js,
// unmodified and from its own directory, with @fastify/compress applied to the Fastify
// instance it makes, before its routes. Applied, not registered: heavy.js declares its
// routes in the same tick as it makes the instance, and a registered plugin loads only
// at listen, after them, while @fastify/compress attaches itself to each route in an
// onRoute hook, so a registered one compresses nothing (found by TestPM2CompressPeer).
// The plugin is fastify-plugin'd (it would decorate the root instance anyway), so calling
// it on the instance is what registering it first would do. The peer's directory may be
// read-only: the script is written into the sweep's own. %s: the peer's directory, as a
// JSON string.
const compressScript = `'use strict';
// Written by ceiling sweep (internal/ceiling/peers.go): the Fastify heavy peer with
// @fastify/compress, threshold 1 KiB, its default levels (gzip 6, br 4, zstd 3).
const path = require('path');
const { createRequire } = require('module');
const heavy = path.join(%s, 'heavy.js');
const peerRequire = createRequire(heavy);
const fastify = peerRequire('fastify');
const compress = peerRequire('@fastify/compress');
function withCompress (...args) {
  const app = fastify(...args);
  compress(app, { threshold: 1024, encodings: ['zstd', 'br', 'gzip'] }, (err) => { if (err) throw err; });
  return app;
}
Object.assign(withCompress, fastify);
require.cache[peerRequire.resolve('fastify')].exports = withCompress;
require(heavy);
`

// startPM2Compress writes compressScript into the server's directory and runs it as
// startPM2 runs heavy.js.
func (s *Sweeper) startPM2Compress(ctx context.Context, srv *Server, dir string) (*Server, error) {
	quoted, _ := json.Marshal(s.peers.peerDir)
	script := filepath.Join(dir, "heavy-compress.js")
	if err := os.WriteFile(script, fmt.Appendf(nil, compressScript, quoted), 0o644); err != nil {
		return nil, fmt.Errorf("start pm2: %w", err)
	}
	return s.startPM2Script(ctx, srv, dir, script, s.peers.peerDir)
}

// startNginx runs nginx with N worker processes on the static template through package
// frontproxy, pinned to the server's cores: the sweep's Pin wraps nginx's command line
// (frontproxy.Options.Wrap), so the affinity is set before nginx forks and every worker
// inherits it, the same way the cluster's workers inherit the supervisor's. (Not
// worker_cpu_affinity: that would need a template change and leaves the master unpinned;
// not sched_setaffinity after the start: that races with the workers' first requests.)
func (s *Sweeper) startNginx(ctx context.Context, srv *Server, dir string) (*Server, error) {
	logf, err := os.Create(srv.logPath)
	if err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	defer logf.Close()
	opt := frontproxy.Options{
		Binary: s.peers.nginx,
		Prefix: filepath.Join(dir, "nginx"),
		Params: frontproxy.Params{StaticRoot: s.peers.staticRoot, WorkerProcesses: srv.N, RlimitNofile: nofileLimit()},
		Stderr: logf,
	}
	if srv.CPUs != nil {
		cpus := srv.CPUs
		opt.Wrap = func(argv []string) []string { return s.cfg.Pin(cpus, argv) }
	}
	tmpl := s.peers.nginxTmpl
	if srv.Mode == ModeNginxGzip {
		tmpl = s.peers.gzipTmpl
	}
	px, err := frontproxy.Start(ctx, tmpl, opt)
	if err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	srv.pid, srv.Addr, srv.Argv = px.Pid(), px.Addr(), px.Argv()
	// The error log, so a run's errors reach its ErrorText as the workers' logs do.
	srv.logPath = filepath.Join(px.Prefix(), "error.log")
	srv.stop = px.Stop
	s.log.Info("nginx started", zap.Int("n", srv.N), zap.Int("pid", srv.pid))
	return srv, nil
}

// nofileLimit is worker_rlimit_nofile for nginx: frontproxy's default, or the hard limit
// when lower, since only a privileged nginx may raise it and an unprivileged one logs an
// alert.
func nofileLimit() int {
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &r) == nil && r.Max < frontproxy.DefaultRlimitNofile {
		return int(r.Max)
	}
	return frontproxy.DefaultRlimitNofile
}

// FreePort returns 127.0.0.1:PORT with a port the kernel just handed out and released.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a port: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
