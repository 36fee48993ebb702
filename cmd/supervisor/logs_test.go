package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/applog"
	"golang.org/x/sys/unix"
)

// TestLogsCommand: `supervisor logs` prints the last lines the running supervisor keeps,
// all or one slot's, and with -f follows new ones (pm2 logs), with no log file configured.
func TestLogsCommand(t *testing.T) {
	c := startRun(t, fmt.Sprintf("instances: 2\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv), "--", os.Args[0])
	logs := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"logs", "-socket", c.socket}, args...), func(string) string { return "" }, &out, io.Discard)
		if err != nil {
			t.Fatalf("logs %q: %v", args, err)
		}
		return out.String()
	}
	if got := strings.Count(logs("--lines", "2"), "\n"); got != 2 {
		t.Errorf("logs --lines 2 printed %d lines, want 2 (pm2 logs --lines)", got)
	}
	if got := strings.Count(logs("-n", "3"), "\n"); got != 3 {
		t.Errorf("logs -n 3 printed %d lines", got)
	}
	one := logs("-n", "0", "1")
	if !strings.Contains(one, `"slot": 1`) {
		t.Errorf("logs 1: no line of slot 1:\n%s", one)
	}
	for _, l := range strings.Split(strings.TrimSpace(one), "\n") {
		if !strings.Contains(l, `"slot": 1`) && !strings.HasPrefix(l, "1|") { // an event of slot 1's, or a line of its worker's
			t.Errorf("logs 1 printed a line of another slot: %s", l)
		}
	}
	// -f: the last line, then what the reload logs, until the client gives up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"logs", "-socket", c.socket, "-f", "-n", "1"}, func(string) string { return "" }, &out, io.Discard)
	}()
	time.Sleep(200 * time.Millisecond)
	if out, err := c.cmd("reload"); err != nil {
		t.Fatalf("reload: %v %s", err, out)
	}
	waitUntil(t, 10*time.Second, "the reload followed", func() bool { return strings.Contains(out.String(), "reload done") })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("logs -f ended with %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "-socket", c.socket, "x"}, `app "x": no such app: this supervisor runs one app without a name`},
		{[]string{"logs", "-socket", c.socket, "1", "2"}, "want [APP] [SLOT]"},
		{[]string{"logs", "-socket", c.socket, "-n", "-3"}, "want a count >= 0"},
		{[]string{"logs", "-socket", c.socket, "2"}, "worker 2: no such worker: this supervisor has 0, 1"},
	} {
		if err := run(context.Background(), tc.args, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestLogFormats: -log-format console writes one readable line per event with the same
// ISO 8601 time as the JSON; a wrong value names the flag.
func TestLogFormats(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 1\nwait_ready: true\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv)), 0o600)
	for _, format := range []string{"console", "json", "auto"} { // auto: console, even to a buffer
		t.Run(format, func(t *testing.T) {
			c := &runningCluster{socket: filepath.Join(dir, format+".sock")}
			logs := &syncBuffer{}
			done := make(chan error, 1)
			go func() {
				done <- run(context.Background(), []string{"run", "-config", cfg, "-socket", c.socket, "-listen", "127.0.0.1:0", "-log-format", format, "--", os.Args[0]},
					func(string) string { return "" }, io.Discard, logs)
			}()
			waitUntil(t, 20*time.Second, "worker online", func() bool { return strings.Contains(logs.String(), "worker online") })
			c.cmd("stop")
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			first := strings.SplitN(logs.String(), "\n", 2)[0]
			isJSON := strings.HasPrefix(first, "{")
			if isJSON != (format == "json") {
				t.Errorf("-log-format %s wrote %q", format, first)
			}
			if !strings.Contains(first, time.Now().UTC().Format("2006-01-02T")) {
				t.Errorf("first line %q: want an ISO 8601 time", first)
			}
		})
	}
	err := run(context.Background(), []string{"run", "-config", cfg, "-socket", filepath.Join(dir, "x.sock"), "-log-format", "pretty"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "log-format") {
		t.Errorf("-log-format pretty: %v", err)
	}
}

// TestLogDirChecked: a -log-dir that another user could write, or that is not a
// directory, is refused at start with the path and the fix; a fresh one is made 0700.
func TestLogDirChecked(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o775)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	fresh := filepath.Join(dir, "fresh", "logs")
	for _, tc := range []struct{ name, dir, want string }{
		{"group-writable", open, "log-dir: " + open + " is writable by its group or by others (mode -rwxrwxr-x): they could put links there that the logs would follow; chmod go-w " + open},
		{"a file", file, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), []string{"run", "-socket", filepath.Join(dir, tc.name+".sock"), "-log-dir", tc.dir, "--", "/bin/true"},
				func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run -log-dir %s: %v, want an error with %q", tc.dir, err, tc.want)
			}
		})
	}
	if err := os.MkdirAll(fresh, 0o700); err != nil { // as run makes it
		t.Fatal(err)
	}
	if err := applog.CheckDir(fresh); err != nil {
		t.Errorf("a fresh directory: %v", err)
	}
}

// TestLogsEscapesControls: an app's line carrying terminal escapes (a request path with
// ESC ]0;...BEL ESC[2J: retitle, clear) reaches the operator's terminal escaped under
// `supervisor logs`, tab kept; --raw, and an output that is no terminal, get it as written.
func TestLogsEscapesControls(t *testing.T) {
	t.Parallel()
	// (A byte that is not UTF-8 reaches the client as U+FFFD: the lines travel as JSON.)
	const line = "GET /\x1b]0;pwned\x07\x1b[2J\tx\xc2\x9b6n"
	c := startRun(t, "instances: 1\nwait_ready: false\n", "--", "/bin/sh", "-c", `printf 'GET /\033]0;pwned\007\033[2J\tx\302\2336n\377\n'; exec sleep 60`)
	waitUntil(t, 10*time.Second, "the app's line", func() bool {
		out, _ := c.cmd("logs", "--raw")
		return strings.Contains(out, "pwned")
	})
	onTerminal := func(args ...string) string {
		t.Helper()
		master, slave := openPTY(t)
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(master) // until EIO, once the slave is closed
			got <- b
		}()
		err := run(context.Background(), append([]string{"logs", "-socket", c.socket}, args...), func(string) string { return "" }, slave, slave)
		slave.Close()
		b := <-got
		master.Close()
		if err != nil {
			t.Fatalf("logs %q: %v", args, err)
		}
		return string(b)
	}
	if out := onTerminal(); !strings.Contains(out, `0|`) || !strings.Contains(out, `GET /\x1b]0;pwned\x07\x1b[2J`+"\tx"+`\u009b6n`) || strings.ContainsAny(out, "\x1b\x07\u009b") {
		t.Errorf("logs on a terminal: %q, want the controls escaped, the tab kept", out)
	}
	if out := onTerminal("--raw"); !strings.Contains(out, "\x1b]0;pwned\x07") {
		t.Errorf("logs --raw on a terminal: %q, want the line as written", out)
	}
	var piped bytes.Buffer
	if err := run(context.Background(), []string{"logs", "-socket", c.socket}, func(string) string { return "" }, &piped, io.Discard); err != nil ||
		!strings.Contains(piped.String(), line) {
		t.Errorf("logs into a pipe: %v %q, want the line as written", err, piped.String())
	}
}

// openPTY opens a pseudo-terminal: the master to read what was written to the slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}
