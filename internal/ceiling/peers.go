package ceiling

import (
	"bufio"
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

// Peers in the same run: what a user would otherwise deploy, measured in the same sweep
// at the same N, with the same generator, pinning and connections as our cluster, so the
// report gives ratios rather than absolutes from different days and machines.
//
//   - ModePM2: PM2's cluster mode (`pm2 start heavy.js -i N`) running the Fastify
//     implementation of the heavy PATCH (the node-heavy peer), for the heavy workload.
//   - ModeNginx: nginx with N worker processes serving the static page from disk
//     (configs/nginx/static.conf through package frontproxy), for the static workload.
//   - ModePM2Compress: ModePM2 with @fastify/compress applied to the peer's Fastify
//     (threshold 1 KiB, its default levels: gzip 6, br 4, zstd 3, ours' 6, 4 and 2), for
//     heavy+gzip, heavy+br and, where node's zlib has it (22.15+), heavy+zstd.
//   - ModeNginxGzip: ModeNginx's template with `gzip on` at level 6 (ours' default) in
//     place of `gzip_static on`: the page compressed per request, for static+gzip.
//
// peerWorkload is the one workload each peer stands in for; peerCodings the content
// codings it serves that workload in (nginx's gzip_static sends the .gz beside the page;
// Debian's nginx has no brotli or zstd without extra modules); a peer in peerCodedOnly
// serves only those (its plain answers would be its sibling's).
var (
	peerWorkload  = map[string]string{ModePM2: "heavy", ModeNginx: "static", ModePM2Compress: "heavy", ModeNginxGzip: "static"}
	peerCodings   = map[string][]string{ModeNginx: {"gzip"}, ModePM2Compress: {"gzip", "zstd", "br"}, ModeNginxGzip: {"gzip"}}
	peerCodedOnly = map[string]bool{ModePM2Compress: true, ModeNginxGzip: true}
)

// PeerCompressVersion is the @fastify/compress that ModePM2Compress is measured with,
// pinned as the node-heavy peer pins fastify (5.12.8): its 9.x declares fastify 5.x.
const PeerCompressVersion = "9.2.0"

func isPeer(mode string) bool { _, ok := peerWorkload[mode]; return ok }

// ServesWorkload reports whether a server of mode runs workload: the cluster and the one
// process run every workload, a peer only the one it stands in for (PM2 the heavy PATCH,
// nginx the static page).
func ServesWorkload(mode, workload string) bool {
	if workload == AppWorkload { // the user's app: under the supervisor, and under PM2 beside it
		return mode == ModeCluster || mode == ModePM2
	}
	if w, ok := peerWorkload[mode]; ok {
		base, coding, encoded := strings.Cut(workload, "+")
		if !encoded {
			return w == base && !peerCodedOnly[mode]
		}
		return w == base && slices.Contains(peerCodings[mode], coding)
	}
	return true
}

// workloadsFor are the configured workloads a server of mode runs: those it serves, less
// the codings findPeers found it lacks here.
func (s *Sweeper) workloadsFor(mode string) []Workload {
	var out []Workload
	for _, w := range s.cfg.Workloads {
		if ServesWorkload(mode, w.Name) && !slices.Contains(s.peers.lacks[mode], requestedCoding(w.Name)) {
			out = append(out, w)
		}
	}
	return out
}

// peerSetup is what findPeers found: the programs and files each peer runs with, and
// why a peer is skipped.
type peerSetup struct {
	skip       map[string]string // mode -> why it is skipped
	pm2        string            // pm2 binary, resolved
	pm2Script  string            // the script PM2 runs, absolute
	pm2Dir     string            // its working directory; "": the sweep's
	nginx      string            // nginx binary, resolved
	nginxTmpl  []byte
	gzipTmpl   []byte // nginxTmpl with gzip on in place of gzip_static (ModeNginxGzip)
	staticRoot string // absolute
	peerDir    string // the Fastify peer's directory, absolute (ModePM2Compress)
	// lacks are the codings a peer cannot serve on this host (node without zstd),
	// left out of its workloads with a note.
	lacks map[string][]string
}

// findPeers resolves each requested peer that has a workload to run, and notes (once)
// each one that cannot run, so a machine without node, pm2 or nginx still sweeps.
func (s *Sweeper) findPeers() {
	s.peers.skip = make(map[string]string)
	s.peers.lacks = make(map[string][]string)
	for _, m := range s.cfg.Modes {
		if !isPeer(m) || len(s.workloadsFor(m)) == 0 {
			continue
		}
		var why string
		switch m {
		case ModePM2:
			if s.appMode() {
				why = s.findAppPM2()
			} else {
				why = s.findPM2()
			}
		case ModeNginx:
			why = s.findNginx()
		case ModePM2Compress:
			why = s.findPM2Compress()
		case ModeNginxGzip:
			if why = s.findNginx(); why == "" {
				why = s.gzipTemplate()
			}
		}
		if why != "" {
			s.peers.skip[m] = why
			stands := peerWorkload[m]
			if s.appMode() {
				stands = "the same app"
			}
			s.notes = append(s.notes, fmt.Sprintf("peer %s (%s) skipped: %s", m, stands, why))
		}
	}
}

func (s *Sweeper) findPM2() string {
	dir, why := s.findPeerHeavy()
	if why != "" {
		return why
	}
	if why = s.findPM2Binary(); why == "" {
		s.peers.pm2Script, s.peers.pm2Dir = filepath.Join(dir, "heavy.js"), dir
	}
	return why
}

// findPM2Compress checks what ModePM2Compress needs beyond ModePM2's: @fastify/compress
// installed beside fastify, and node's zlib for each coding asked (zstd from 22.15).
func (s *Sweeper) findPM2Compress() string {
	dir, why := s.findPeerHeavy()
	if why != "" {
		return why
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@fastify", "compress")); err != nil {
		return fmt.Sprintf("no node_modules/@fastify/compress in %s (run npm install @fastify/compress@%s there)", dir, PeerCompressVersion)
	}
	if why = s.findPM2Binary(); why != "" {
		return why
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return fmt.Sprintf("node not found: %v", err)
	}
	// @fastify/compress leaves out what zlib lacks and would answer identity to it.
	wantZstd := slices.ContainsFunc(s.workloadsFor(ModePM2Compress), func(w Workload) bool { return requestedCoding(w.Name) == "zstd" })
	probe := exec.Command(node, "-e", "process.stdout.write(typeof require('zlib').createZstdCompress)")
	if out, err := probe.Output(); wantZstd && (err != nil || string(out) != "function") {
		v, _ := exec.Command(node, "--version").Output()
		s.peers.lacks[ModePM2Compress] = []string{"zstd"}
		s.notes = append(s.notes, fmt.Sprintf("peer %s: node %s has no zstd in zlib (22.15+): heavy+zstd not measured on it",
			ModePM2Compress, strings.TrimSpace(string(v))))
	}
	s.peers.peerDir = dir
	return ""
}

// findPeerHeavy checks the Fastify peer's directory (-peer-heavy) and returns it absolute.
func (s *Sweeper) findPeerHeavy() (string, string) {
	if s.cfg.PeerHeavyDir == "" {
		return "", "no Fastify peer directory given (ceiling sweep -peer-heavy DIR, make PEER_HEAVY=DIR; docs/ceiling.md says how to prepare one)"
	}
	dir, err := filepath.Abs(s.cfg.PeerHeavyDir)
	if err != nil {
		return "", err.Error()
	}
	if _, err := os.Stat(filepath.Join(dir, "heavy.js")); err != nil {
		return "", fmt.Sprintf("no heavy.js in %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "fastify")); err != nil {
		return "", fmt.Sprintf("no node_modules/fastify in %s (run npm install there)", dir)
	}
	return dir, ""
}

// findPM2Binary resolves pm2, and node when pm2 is a node script.
func (s *Sweeper) findPM2Binary() string {
	bin := s.cfg.PM2
	if bin == "" {
		bin = "pm2"
	}
	pm2, err := exec.LookPath(bin)
	if err != nil {
		return fmt.Sprintf("pm2 not found (%v): npm install -g pm2, or give the path of node_modules/.bin/pm2", err)
	}
	if interp := shebang(pm2); strings.Contains(interp, "node") {
		if _, err := exec.LookPath("node"); err != nil {
			return fmt.Sprintf("%s runs on node (%s), which is not on PATH", pm2, interp)
		}
	}
	s.peers.pm2 = pm2
	return ""
}

// shebang is the interpreter line of a script ("/usr/bin/env node"), "" for a binary.
func shebang(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if !strings.HasPrefix(line, "#!") {
		return ""
	}
	return strings.TrimSpace(line[2:])
}

func (s *Sweeper) findNginx() string {
	var err error
	bin := s.cfg.Nginx
	if bin == "" {
		bin, err = frontproxy.LookPath()
	} else if bin, err = exec.LookPath(bin); err != nil {
		err = fmt.Errorf("nginx not found: %w", err)
	}
	if err != nil {
		return err.Error()
	}
	tmpl := s.cfg.NginxTemplate
	if tmpl == "" {
		tmpl = "configs/nginx/static.conf"
	}
	b, err := os.ReadFile(tmpl)
	if err != nil {
		return fmt.Sprintf("read the nginx template: %v", err)
	}
	root := s.cfg.StaticRoot
	if root == "" {
		root = "internal/shop/static"
	}
	if root, err = filepath.Abs(root); err != nil {
		return err.Error()
	}
	for _, w := range s.workloadsFor(ModeNginx) {
		file := filepath.Join(root, strings.TrimPrefix(w.Path, "/static/"))
		if _, err := os.Stat(file); err != nil {
			return fmt.Sprintf("nothing to serve for %s: %v", w.Path, err)
		}
	}
	s.peers.nginx, s.peers.nginxTmpl, s.peers.staticRoot = bin, b, root
	return ""
}

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

// PeerComparison is our cluster against a peer at one N of one sweep, as ratios.
type PeerComparison struct {
	Workload string `json:"workload"`
	Peer     string `json:"peer"` // ModePM2 or ModeNginx
	N        int    `json:"n"`
	Ours     Run    `json:"ours"`
	Theirs   Run    `json:"theirs"`
	// RPSRatio is our req/s ÷ the peer's: above 1 we served more. CPURatio is our server
	// CPU per request ÷ the peer's: below 1 we spent less. BytesRatio is our response
	// bytes per request ÷ the peer's (the payloads need not match byte for byte). 0: not
	// comparable (a run skipped or empty).
	RPSRatio   float64 `json:"rps_ratio"`
	CPURatio   float64 `json:"cpu_ratio"`
	BytesRatio float64 `json:"bytes_ratio"`
}

// ComparePeers pairs each peer run of the sweep (unshaped) with the cluster's run of the
// same workload and N, in the order of the peer runs. A peer run with no cluster run
// beside it, or skipped, is still listed, with zero ratios.
func ComparePeers(runs []Run) []PeerComparison {
	ours := make(map[string]Run)
	key := func(r Run) string { return fmt.Sprintf("%s/%d", r.Workload, r.N) }
	for _, r := range runs {
		if r.Mode == ModeCluster && r.Purpose == PurposeSweep && r.LinkBitsPerS == 0 {
			if prev, ok := ours[key(r)]; !ok || prev.Skipped != "" {
				ours[key(r)] = r
			}
		}
	}
	ratio := func(a, b float64) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return round(a/b, 3)
	}
	var out []PeerComparison
	for _, r := range runs {
		if !isPeer(r.Mode) || r.Purpose != PurposeSweep || r.LinkBitsPerS != 0 {
			continue
		}
		c := PeerComparison{Workload: r.Workload, Peer: r.Mode, N: r.N, Theirs: r}
		if o, ok := ours[key(r)]; ok {
			c.Ours = o
			if o.Skipped == "" && r.Skipped == "" {
				c.RPSRatio = ratio(o.RPS, r.RPS)
				c.CPURatio = ratio(o.ServerCPUUsPerReq, r.ServerCPUUsPerReq)
				c.BytesRatio = ratio(o.BytesPerReq, r.BytesPerReq)
			}
		}
		out = append(out, c)
	}
	return out
}

// Line is the comparison in one line: peer=pm2 workload=heavy n=2 rps_ratio=... .
func (c PeerComparison) Line() string {
	if c.Theirs.Skipped != "" {
		return fmt.Sprintf("peer=%s workload=%s n=%d skipped=%q", c.Peer, c.Workload, c.N, c.Theirs.Skipped)
	}
	return fmt.Sprintf("peer=%s workload=%s n=%d rps_ratio=%.2f cpu_us_ratio=%.2f bytes_ratio=%.2f ours=%.0f/%.1fus/%s theirs=%.0f/%.1fus/%s",
		c.Peer, c.Workload, c.N, c.RPSRatio, c.CPURatio, c.BytesRatio, c.Ours.RPS, c.Ours.ServerCPUUsPerReq, or(c.Ours.Verdict, "-"),
		c.Theirs.RPS, c.Theirs.ServerCPUUsPerReq, or(c.Theirs.Verdict, "-"))
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// peerName is a peer's name in the report and the plots: of workload's peer, where
// PM2 runs the user's own app rather than the Fastify heavy PATCH.
func peerName(mode, workload string) string {
	switch {
	case mode == ModePM2 && workload == AppWorkload:
		return "PM2 cluster (the same app)"
	case mode == ModePM2:
		return "PM2 cluster + Fastify"
	case mode == ModeNginx:
		return "nginx"
	case mode == ModePM2Compress:
		return "PM2 cluster + Fastify + @fastify/compress"
	case mode == ModeNginxGzip:
		return "nginx gzip on"
	}
	return mode
}
