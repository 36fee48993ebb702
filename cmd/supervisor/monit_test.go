package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/proctest"
)

// TestMonitProcess: `supervisor monit` against a real supervisor with two workers under a
// little load: one frame on a pipe, then the live view in a real terminal (a tmux pane of
// fixed size): both slots online with req/s above 0, the host's cores, and on q or ^C the
// process exits 0 with the terminal restored (main screen, cursor shown).
func TestMonitProcess(t *testing.T) {
	c := startRun(t, fmt.Sprintf("instances: 2\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv), "--", os.Args[0])
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	stopLoad := startLoad(t, st.Addr)
	defer stopLoad()

	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"monit", "-socket", c.socket}, func(string) string { return "" }, &out, &errb); err != nil {
		t.Fatalf("monit on a pipe: %v %s", err, errb.String())
	}
	if rows := onlineRows(out.String()); len(rows) != 2 || !strings.Contains(out.String(), "host cpu") || strings.Contains(out.String(), "q to quit") {
		t.Errorf("monit on a pipe: want one frame, two online rows, host cpu, no key hint; got:\n%s", out.String())
	}

	proctest.Need(t, "tmux")
	dir := t.TempDir()
	sock := filepath.Join(dir, "tmux.sock") // a server of our own, not the user's
	conf := filepath.Join(dir, "tmux.conf")
	// No status line: the pane is the whole 100x30 window.
	if err := os.WriteFile(conf, []byte("set -g status off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmux := func(args ...string) (string, error) {
		out, err := exec.Command("tmux", append([]string{"-S", sock, "-f", conf}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { tmux("kill-server") }) // HUP to anything still in a pane
	pane := func(name, format string) string {
		out, _ := tmux("display-message", "-p", "-t", name, format)
		return strings.TrimSpace(out)
	}
	// How each pane's monit is ended: a key, or SIGTERM to the process (the shell's child).
	quits := map[string]func(name string) error{
		"quit-q":      func(name string) error { return sendKeys(tmux, name, "q") },
		"quit-ctrl-c": func(name string) error { return sendKeys(tmux, name, "C-c") },
		"quit-sigterm": func(name string) error {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%[1]s/task/%[1]s/children", pane(name, "#{pane_pid}")))
			if err != nil {
				return err
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return fmt.Errorf("monit's pid from %q: %w", b, err)
			}
			return syscall.Kill(pid, syscall.SIGTERM)
		},
	}
	// A shell around monit says, once it has exited, how and whether the terminal's modes
	// are back as they were, then keeps the pane open (tmux hides the cursor of a dead pane).
	const wrap = `before=$(stty -g); "$0" "$@"; rc=$?; ` +
		`if [ "$(stty -g)" = "$before" ]; then modes=restored; else modes=changed; fi; ` +
		`echo "monit exited $rc, terminal modes $modes"; exec sleep 60`
	for name := range quits {
		if out, err := tmux("new-session", "-d", "-s", name, "-x", "100", "-y", "30",
			"-e", roleEnv+"=supervisor", "-e", "GORACE=atexit_sleep_ms=0",
			"sh", "-c", wrap, os.Args[0], "monit", "-socket", c.socket); err != nil {
			t.Fatalf("tmux new-session: %v %s", err, out)
		}
	}

	start := time.Now()
	for name := range quits {
		// Both slots shown online with req/s above 0 in some frame, and a frame with three
		// bars of history: redrawn each second, with the figures of each.
		seen, bars := map[int]bool{}, 0
		var screen string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			screen, _ = tmux("capture-pane", "-p", "-t", name)
			for id, r := range onlineRows(screen) {
				if r.rps > 0 {
					seen[id] = true
				}
				bars = max(bars, r.bars)
			}
			if seen[0] && seen[1] && bars >= 3 && strings.Contains(screen, "cpu0 [") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no frames with both slots serving, 3 s of history and the host's cores in 20 s; last:\n%s", name, screen)
			}
		}
		if got := pane(name, "#{alternate_on} #{cursor_flag}"); got != "1 0" {
			t.Errorf("%s: alternate screen, cursor flag = %q while running, want 1 0", name, got)
		}
		if name == "quit-q" {
			t.Logf("screen (%v after start):\n%s", time.Since(start).Round(100*time.Millisecond), screen)
		}
	}
	for name, quit := range quits {
		if err := quit(name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for name := range quits {
		var screen string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if screen, _ = tmux("capture-pane", "-p", "-t", name); strings.Contains(screen, "monit exited") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still running 5 s later:\n%s", name, screen)
			}
		}
		if !strings.Contains(screen, "monit exited 0, terminal modes restored") {
			t.Errorf("%s:\n%s\nwant an exit status of 0 and the modes restored", name, screen)
		}
		if got := pane(name, "#{alternate_on} #{cursor_flag}"); got != "0 1" {
			t.Errorf("%s: alternate screen, cursor flag = %q after exit, want 0 1 (main screen, cursor shown)", name, got)
		}
	}
}

// rowRE is an online worker's line of a frame: its slot, its req/s, the rest.
var rowRE = regexp.MustCompile(`(?m)^(\d+) +online +([\d,.]+) (.*)$`)

// frameRow is what a test reads of a worker's line: its req/s and how many bars its
// sparkline has.
type frameRow struct {
	rps  float64
	bars int
}

// onlineRows reads a frame's online workers by slot.
func onlineRows(screen string) map[int]frameRow {
	rows := map[int]frameRow{}
	for _, m := range rowRE.FindAllStringSubmatch(screen, -1) {
		id, _ := strconv.Atoi(m[1])
		rps, _ := strconv.ParseFloat(strings.ReplaceAll(m[2], ",", ""), 64)
		rows[id] = frameRow{rps: rps, bars: countBars(m[3])}
	}
	return rows
}

// countBars counts the sparkline cells in s.
func countBars(s string) int {
	n := 0
	for _, r := range s {
		if strings.ContainsRune("▁▂▃▄▅▆▇█", r) { // monit's sparkline blocks
			n++
		}
	}
	return n
}

// sendKeys types keys into the tmux pane name.
func sendKeys(tmux func(...string) (string, error), name string, keys ...string) error {
	if out, err := tmux(append([]string{"send-keys", "-t", name}, keys...)...); err != nil {
		return fmt.Errorf("send-keys: %w: %s", err, out)
	}
	return nil
}

// startLoad sends requests to addr from two clients, a new connection each, so that the
// kernel's steering spreads them over both workers, until the returned stop is called.
func startLoad(t *testing.T, addr string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(2 * time.Millisecond):
				}
				if resp, err := client.Get("http://" + addr + "/"); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
