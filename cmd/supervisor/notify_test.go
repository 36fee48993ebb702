package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/proctest"
)

// TestSystemdNotify: run under a datagram socket standing in for systemd's NOTIFY_SOCKET,
// the supervisor says READY=1 once its workers are online, RELOADING=1 and READY=1 around a
// reload, STOPPING=1 at the end, and feeds the watchdog meanwhile; the workers do not get
// the socket.
func TestSystemdNotify(t *testing.T) {
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "notify")
	ns, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	msgs := make(chan string, 1000)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := ns.Read(b)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(b[:n])
		}
	}()
	envFile := filepath.Join(dir, "worker-env")
	cfg := filepath.Join(dir, "cluster.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 2\nenv: {GORACE: atexit_sleep_ms=0, %s: worker, FAKE_ENV_FILE: %q}\n", roleEnv, envFile)), 0o600)
	c := &runningCluster{socket: filepath.Join(dir, "s.sock")}
	env := map[string]string{"NOTIFY_SOCKET": sockPath, "WATCHDOG_USEC": "200000"}
	done := make(chan error, 1)
	logs := &syncBuffer{}
	go func() {
		done <- run(context.Background(), []string{"run", "-config", cfg, "-socket", c.socket, "-listen", "127.0.0.1:0", "--", os.Args[0]},
			func(k string) string { return env[k] }, io.Discard, logs)
	}()
	var got []string // lifecycle notifications, first lines
	watchdogs := 0
	next := func(want string) string {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("notify socket closed waiting for %s; got %q", want, got)
				}
				if m == "WATCHDOG=1" {
					watchdogs++
					continue
				}
				if strings.HasPrefix(m, "STATUS=") || strings.HasPrefix(m, "FDSTORE") {
					continue // the file descriptor store has a test of its own
				}
				first, _, _ := strings.Cut(m, "\n")
				got = append(got, first)
				if first != want {
					t.Fatalf("notification %q, want %s (so far %q)\n%s", m, want, got, logs)
				}
				return m
			case <-timeout:
				t.Fatalf("no %s within 20 s; got %q\n%s", want, got, logs)
			}
		}
	}
	ready := next("READY=1")
	// A command's worker counts as online from its start until its first ready message
	// (docs/supervisor.md), so READY=1 can come before the workers have run far enough to
	// write their environment: on a loaded machine, -race, that is over a second.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(envFile); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no worker wrote %s within 20 s\n%s", envFile, logs)
		}
	}
	if !regexp.MustCompile(`STATUS=2/2 online, 0 errored, [0-9,]+ req/s`).MatchString(ready) {
		t.Errorf("READY notification %q: want the status line", ready)
	}
	if out, err := c.cmd("reload"); err != nil {
		t.Fatalf("reload: %v %s", err, out)
	}
	if m := next("RELOADING=1"); !regexp.MustCompile(`MONOTONIC_USEC=[0-9]+`).MatchString(m) {
		t.Errorf("reload notification %q lacks MONOTONIC_USEC", m)
	}
	next("READY=1")
	time.Sleep(300 * time.Millisecond)
	if out, err := c.cmd("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	next("STOPPING=1")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if watchdogs < 2 {
		t.Errorf("%d WATCHDOG=1 over the run (every 100 ms asked), want several", watchdogs)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	// Each worker has a notify socket of its own (for programs that speak sd_notify), never
	// the supervisor's, and no watchdog.
	if bytes.Contains(b, []byte("NOTIFY_SOCKET="+sockPath)) || regexp.MustCompile(`(?m)^WATCHDOG_USEC=.`).Match(b) {
		t.Errorf("a worker inherited the supervisor's notify variables:\n%s", b)
	}
}

// unitExposure is `systemd-analyze security`'s overall exposure level of the unit file at
// path, and the whole report.
func unitExposure(t *testing.T, sa, path string) (float64, []byte) {
	t.Helper()
	out, _ := exec.Command(sa, "security", "--offline=true", path).CombinedOutput()
	re := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(filepath.Base(path)) + `: ([0-9.]+)`)
	m := re.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	exposure, _ := strconv.ParseFloat(string(m[1]), 64)
	return exposure, out
}

// TestSystemdUnit: the shipped unit is hardened (exposure at most 2.5 by
// `systemd-analyze security`) and verifies clean with its paths made real.
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		proctest.Missing(t, "systemd-analyze not installed (Debian: apt-get install systemd; .ci/run does)")
	}
	unit, err := os.ReadFile("../../configs/onehost.service")
	if err != nil {
		t.Fatal(err)
	}
	// Security is judged on the file as shipped.
	exposure, out := unitExposure(t, sa, "../../configs/onehost.service")
	t.Logf("systemd-analyze security: exposure %.1f", exposure)
	if exposure > 2.5 {
		t.Errorf("exposure %.1f, want at most 2.5:\n%s", exposure, out)
	}
	// verify needs what the unit names to exist: its binary under a temp root.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	os.MkdirAll(filepath.Join(root, "configs"), 0o755)
	os.WriteFile(filepath.Join(root, "bin", "supervisor"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(root, "configs", "cluster.yaml"), nil, 0o644)
	path := filepath.Join(root, "onehost.service")
	os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/opt/onehost"), []byte(root)), 0o644)
	if out, err := exec.Command(sa, "verify", path).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The unit's command line is one the supervisor accepts: its flags parse, and the run
	// gets as far as the (absent) configuration file.
	exec := regexp.MustCompile(`(?m)^ExecStart=\S+ (.*)$`).FindSubmatch(unit)
	if exec == nil {
		t.Fatal("no ExecStart")
	}
	args := strings.Fields(string(exec[1]))
	for i, a := range args {
		if a == "-config" && i+1 < len(args) {
			args[i+1] = filepath.Join(root, "absent.yaml")
		}
		if a == "-socket" && i+1 < len(args) {
			args[i+1] = filepath.Join(root, "s.sock")
		}
	}
	if err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("ExecStart's arguments %q: %v, want them to parse and the run to fail on the absent config", args, err)
	}
	for _, want := range []string{"Type=notify", "WatchdogSec=", "LoadCredential=jwt-secret:", "JWT_SECRET_FILE=%d/jwt-secret"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("unit lacks %q", want)
		}
	}
	if bytes.Contains(unit, []byte("Environment=JWT_SECRET=")) {
		t.Error("the unit holds the secret in the clear")
	}
	// ExecReload is the same binary's `reload`, which waits for the roll (kill -HUP would
	// not): its flags parse, and it gets as far as the (absent) control socket.
	reload := regexp.MustCompile(`(?m)^ExecReload=(\S+) (.*)$`).FindSubmatch(unit)
	start := regexp.MustCompile(`(?m)^ExecStart=(\S+)`).FindSubmatch(unit)
	if reload == nil || start == nil || !bytes.Equal(reload[1], start[1]) {
		t.Fatalf("ExecReload %q: want the supervisor of ExecStart (%q) with `reload`", reload, start)
	}
	args = strings.Fields(string(reload[2]))
	for i, a := range args {
		if a == "-socket" && i+1 < len(args) {
			args[i+1] = filepath.Join(root, "s.sock")
		}
	}
	if len(args) == 0 || args[0] != "reload" {
		t.Errorf("ExecReload's arguments %q: want `reload -socket PATH`", args)
	} else if err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "reach the supervisor") {
		t.Errorf("ExecReload's arguments %q: %v, want them to parse and the client to find no supervisor", args, err)
	}
	// The steering program needs bpf(2), which is in @privileged: the filter as systemd
	// applies it must still allow it, and still deny the rest of @privileged.
	allowed, err := syscallFilter(sa, unit)
	if err != nil {
		t.Fatalf("SystemCallFilter: %v", err)
	}
	for name, want := range map[string]bool{"bpf": true, "accept4": true, "setuid": false, "reboot": false, "setrlimit": false} {
		if got := allowed(name); got != want {
			t.Errorf("SystemCallFilter allows %s: %v, want %v", name, got, want)
		}
	}
}

// syscallFilter computes which system calls the unit's SystemCallFilter= lines allow, as
// systemd.exec(5) says: the first line decides the mode (an allow list, or with ~ a deny
// list), later lines add to or remove from it, an empty one resets. Groups (@name) are
// expanded by `systemd-analyze syscall-filter`, so this systemd's definitions count.
func syscallFilter(sa string, unit []byte) (func(string) bool, error) {
	groups := map[string][]string{}
	var expand func(item string, into map[string]bool) error
	expand = func(item string, into map[string]bool) error {
		item, _, _ = strings.Cut(item, ":") // a deny list's :errno
		if !strings.HasPrefix(item, "@") {
			into[item] = true
			return nil
		}
		names, ok := groups[item]
		if !ok {
			out, err := exec.Command(sa, "syscall-filter", item).Output()
			if err != nil {
				return fmt.Errorf("expand %s: %w", item, err)
			}
			lines := strings.Split(string(out), "\n")
			for _, l := range lines[1:] { // the first is the group's name
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					names = append(names, l)
				}
			}
			groups[item] = names
		}
		for _, n := range names {
			if err := expand(n, into); err != nil {
				return err
			}
		}
		return nil
	}
	allowList := false // no filter: everything allowed
	set := map[string]bool{}
	first := true
	for _, m := range regexp.MustCompile(`(?m)^SystemCallFilter=(.*)$`).FindAllSubmatch(unit, -1) {
		v := strings.TrimSpace(string(m[1]))
		if v == "" {
			allowList, set, first = false, map[string]bool{}, true
			continue
		}
		deny := strings.HasPrefix(v, "~")
		items := map[string]bool{}
		for _, it := range strings.Fields(strings.TrimPrefix(v, "~")) {
			if err := expand(it, items); err != nil {
				return nil, err
			}
		}
		if first {
			allowList, first = !deny, false
		}
		// set holds the allowed calls of an allow list, the denied ones of a deny list.
		add := deny != allowList
		for n := range items {
			if add {
				set[n] = true
			} else {
				delete(set, n)
			}
		}
	}
	return func(name string) bool { return set[name] == allowList }, nil
}
