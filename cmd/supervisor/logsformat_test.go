package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/ipc"
)

// The "printer" role: a fork-mode program that writes as a Node app does, a line and a
// JSON log line on stdout and a stack trace on stderr, then waits for SIGTERM. (An init,
// so that TestMain's roles stay as they are.)
func init() {
	if os.Getenv(roleEnv) != "printer" {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	id := os.Getenv(ipc.EnvWorkerID)
	fmt.Printf("hello from %s\n{\"level\":\"info\",\"msg\":\"listening\",\"port\":3000}\n", id)
	fmt.Fprintf(os.Stderr, "Error: boom in %s\n    at handler (/srv/app.js:12:9)\n    at next (/srv/node_modules/express/router.js:7:3)\n", id)
	<-sig
	os.Exit(0)
}

// printerLines are what each printer slot writes: its stdout, its stderr.
func printerLines(slot int) (out, errs []string) {
	return []string{fmt.Sprintf("hello from %d", slot), `{"level":"info","msg":"listening","port":3000}`},
		[]string{fmt.Sprintf("Error: boom in %d", slot), "    at handler (/srv/app.js:12:9)", "    at next (/srv/node_modules/express/router.js:7:3)"}
}

// TestLogsPM2Format: with its log redirected to a file (no terminal, as under systemd or
// `run > file`), a real supervisor process writes its apps' lines as PM2 prints them,
// `ID|APP | line`, a stack trace as its own lines, and its events as readable lines, not
// JSON; `supervisor logs` prints them in PM2's forms (--raw, --json, --timestamp, --err,
// --out) and refuses a slot or an app that does not exist.
func TestLogsPM2Format(t *testing.T) {
	dir := t.TempDir()
	eco := filepath.Join(dir, "ecosystem.config.json")
	os.WriteFile(eco, []byte(fmt.Sprintf(`{"apps": [{"name": "printer", "script": %q, "interpreter": "none", "exec_mode": "fork", "instances": 2,
  "env": {%q: "printer", "GORACE": "atexit_sleep_ms=0"}}]}`, os.Args[0], roleEnv)), 0o600)
	socket := filepath.Join(dir, "s.sock")
	logPath := filepath.Join(dir, "supervisor.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(os.Args[0], "run", "-config", eco, "-socket", socket)
	cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		run(context.Background(), []string{"kill", "-socket", socket}, func(string) string { return "" }, &bytes.Buffer{}, &bytes.Buffer{})
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("the supervisor did not stop")
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("supervisor log:\n%s", b)
		}
	})
	logs := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"logs", "-socket", socket}, args...), func(string) string { return "" }, &out, &errb)
		return out.String(), errb.String(), err
	}
	waitUntil(t, 30*time.Second, "both printers' stack traces in the log", func() bool {
		_, errs, err := logs("--err", "--raw", "-n", "0") // --raw writes the err lines to stderr, as pm2
		return err == nil && strings.Count(errs, "at next") == 2
	})

	t.Run("log file", func(t *testing.T) {
		b, _ := os.ReadFile(logPath)
		prefixed := map[int][]string{} // each slot's lines, in order, without their prefix
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var slot int
			switch {
			case strings.HasPrefix(l, "{") || strings.Contains(l, "worker output") || strings.Contains(l, `"line"`):
				t.Errorf("a line of JSON or a wrapped line in the console log: %s", l)
			case regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+  (INFO|WARN|ERROR)  `).MatchString(l): // an event
			case len(l) > 13 && l[1:13] == "|printer  | ":
				fmt.Sscan(l[:1], &slot)
				prefixed[slot] = append(prefixed[slot], l[13:])
			default:
				t.Errorf("a line neither an event nor ID|APP | line: %q", l)
			}
		}
		for slot := range 2 {
			out, errs := printerLines(slot)
			// Each stream's lines in order; the two streams may interleave (pipes of their own).
			for _, want := range [][]string{out, errs} {
				got := slices.DeleteFunc(slices.Clone(prefixed[slot]), func(s string) bool { return !slices.Contains(want, s) })
				if !slices.Equal(got, want) {
					t.Errorf("slot %d's lines in the log: %q, want %q in this order", slot, got, want)
				}
			}
		}
	})

	tests := []struct {
		name   string
		args   []string
		golden string // of stdout; "" none
		stderr string // stderr's golden; "" must be empty
		match  string // a regexp every line of stdout matches, when set
	}{
		{name: "default view", args: []string{"--lines", "100"}, match: `^(\d{4}-\d\d-\d\dT\S+  INFO  .*|[01]\|printer  \| .*)$`},
		{name: "out", args: []string{"0", "--out"}, golden: "out.txt"},
		{name: "err", args: []string{"printer", "1", "--err"}, golden: "err.txt"},
		{name: "app label and both streams", args: []string{"printer", "--lines", "100", "--err"}, match: `^[01]\|printer  \| (Error: boom in [01]|    at .*)$`},
		{name: "raw", args: []string{"1", "--raw"}, golden: "raw-stdout.txt", stderr: "raw-stderr.txt"},
		{name: "json", args: []string{"1", "--json", "--err"}, golden: "json.txt"},
		{name: "timestamp format", args: []string{"0", "--err", "--timestamp", "[at] HH[h]"}, match: `^at \d\dh 0\|printer  \| `},
		{name: "timestamp default", args: []string{"0", "--err", "--timestamp"}, match: `^\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d 0\|printer  \| `},
		{name: "timestamp literal", args: []string{"0", "--err", "--timestamp=[T]"}, golden: "timestamp.txt"},
	}
	stamp := regexp.MustCompile(`"timestamp":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"`)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, err := logs(tc.args...)
			if err != nil {
				t.Fatalf("logs %q: %v", tc.args, err)
			}
			out = stamp.ReplaceAllString(out, `"timestamp":"TIME"`)
			if tc.golden != "" {
				goldentest.Check(t, "logs/"+tc.golden, []byte(out))
			}
			if tc.stderr != "" {
				goldentest.Check(t, "logs/"+tc.stderr, []byte(errs))
			} else if errs != "" {
				t.Errorf("stderr: %q", errs)
			}
			if tc.match != "" {
				re := regexp.MustCompile(tc.match)
				if out == "" {
					t.Error("printed nothing")
				}
				for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
					if !re.MatchString(l) {
						t.Errorf("line %q does not match %s", l, tc.match)
					}
				}
			}
		})
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"slot that does not exist", []string{"7"}, "logs: worker 7: no such worker: this supervisor has 0, 1 (supervisor status lists them)"},
		{"slot of an app that does not exist", []string{"printer", "2"}, "worker 2: no such worker: app printer has 0, 1"},
		{"unknown app", []string{"nope"}, `app "nope": no such app: the apps are printer`},
		{"raw and json", []string{"--raw", "--json"}, "--raw and --json: choose one"},
		{"err and out", []string{"--err", "--out"}, "--err and --out: choose one"},
		{"timestamp with raw", []string{"--raw", "--timestamp"}, "--timestamp goes with neither --raw"},
		{"unclosed bracket", []string{"--timestamp", "[HH"}, "timestamp: \"[HH\": a [ without its ]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := logs(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("logs %q = %v, want an error with %q", tc.args, err, tc.want)
			}
			if out != "" {
				t.Errorf("logs %q printed %q besides the error", tc.args, out)
			}
		})
	}
}
