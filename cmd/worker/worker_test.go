package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/proctest"
	"github.com/onehost/onehost/internal/seedtest"
)

const testSecret = "twelve-dollar-challenge"

// The test binary is its own worker process: with ONEHOST_TEST_WORKER=1 it runs run().
func TestMain(m *testing.M) {
	if setting := os.Getenv(envBenchHeavy); setting != "" {
		if err := serveHeavy(setting); err != nil {
			fmt.Fprintln(os.Stderr, "serve heavy:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("ONEHOST_TEST_WORKER") == "1" {
		if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// worker is a running worker process: the test binary in worker mode.
type worker = proctest.Proc

// startWorker starts the test binary as a worker with env added to a minimal environment,
// and waits for its "serving" line.
func startWorker(t testing.TB, env ...string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-drain-timeout=5s")
	cmd.Env = append([]string{"ONEHOST_TEST_WORKER=1", "JWT_SECRET=" + testSecret, "HOST=127.0.0.1", "PORT=0",
		"PATH=" + os.Getenv("PATH")}, env...)
	return proctest.Start(t, cmd)
}

// forTransports runs test on each of http1's transports (the worker's -transport).
func forTransports(t *testing.T, test func(t *testing.T, transport string)) {
	for _, tr := range []string{http1.TransportGoroutine, http1.TransportLoop} {
		t.Run(tr, func(t *testing.T) { test(t, tr) })
	}
}

func TestRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	notDB := dir + "/not.db"
	os.WriteFile(notDB, []byte("this is not a database, just text long enough to look like a file header"), 0o644)
	secretFile, emptyFile := dir+"/secret", dir+"/empty"
	os.WriteFile(secretFile, []byte("twelve-dollar-challenge\n"), 0o600)
	os.WriteFile(emptyFile, []byte("\n"), 0o600)
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"no SQLITE_PATH", []string{"JWT_SECRET=x"}, "SQLITE_PATH is not set"},
		{"empty JWT_SECRET", []string{"SQLITE_PATH=" + notDB}, "JWT_SECRET is empty"},
		{"missing database file", []string{"SQLITE_PATH=" + dir + "/missing.db", "JWT_SECRET=x"}, "missing.db"},
		{"not a database", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x"}, "not.db"},
		{"bad port", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "PORT=http"}, "PORT"},
		{"unknown transport", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "TRANSPORT=threads"}, "TRANSPORT"},
		{"unknown synchronous", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "SYNCHRONOUS=off"}, "SYNCHRONOUS (-synchronous) \"off\": want normal"},
		{"unknown coding", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "COMPRESS=deflate"}, "COMPRESS (-compress): parse codings"},
		{"coding level", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "COMPRESS=gzip:11"}, "gzip level \"11\": want 1 to 6"},
		// br:11 cost 54 ms of the event loop per heavy PATCH, 1000× an uncompressed one.
		{"costly coding level", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "COMPRESS=zstd,br:11"}, "COMPRESS (-compress): parse codings \"zstd,br:11\": br level 11 costs more than 6× the CPU of an uncompressed heavy PATCH per request, on the event loop: the highest allowed is 1"},
		{"compress static", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "COMPRESS=gzip", "COMPRESS_ROUTES=static"}, "static is always served precompressed"},
		{"unknown compressed route", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "COMPRESS_ROUTES=api"}, "unknown route \"api\""},
		{"bad MAX_CONNS", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "MAX_CONNS=-5"}, "MAX_CONNS (-max-conns) \"-5\": want a number of connections"},
		{"bad LOOPS", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "LOOPS=-1"}, "LOOPS (-loops) \"-1\": want a number of event loops"},
		{"bad compress min", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "COMPRESS_MIN=1k"}, "COMPRESS_MIN (-compress-min)"},
		{"bad ALLOW_CHALLENGE_SECRET", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "ALLOW_CHALLENGE_SECRET=yes please"}, "ALLOW_CHALLENGE_SECRET"},
		{"secret twice", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET=x", "JWT_SECRET_FILE=" + secretFile}, "both set"},
		{"secret file missing", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET_FILE=" + dir + "/absent"}, "JWT_SECRET_FILE: read secret"},
		{"secret file empty", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET_FILE=" + emptyFile}, "is empty"},
		// A good secret file gets past the secret to the next check, the database.
		{"secret from a file", []string{"SQLITE_PATH=" + notDB, "JWT_SECRET_FILE=" + secretFile}, "not.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				for _, kv := range tt.env {
					if name, v, _ := strings.Cut(kv, "="); name == k {
						return v
					}
				}
				return ""
			}
			err := run(context.Background(), nil, getenv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run = %v, want an error mentioning %q", err, tt.want)
			}
			if _, serr := os.Stat(dir + "/missing.db"); serr == nil {
				t.Error("a missing database file was created")
			}
		})
	}
}

// TestWaitProfilesWritten: -blockprofile, -mutexprofile and -trace leave their files at a
// clean stop, each in the format go tool pprof / go tool trace reads (a gzipped profile, a
// trace's "go 1." header), with requests served between.
func TestWaitProfilesWritten(t *testing.T) {
	dir := t.TempDir()
	block, mutex, trace := dir+"/block.pb", dir+"/mutex.pb", dir+"/trace.out"
	cmd := exec.Command(os.Args[0], "-drain-timeout=5s", "-loops=3",
		"-blockprofile", block, "-mutexprofile", mutex, "-trace", trace)
	cmd.Env = []string{"ONEHOST_TEST_WORKER=1", "JWT_SECRET=" + testSecret, "HOST=127.0.0.1", "PORT=0",
		"PATH=" + os.Getenv("PATH"), "SQLITE_PATH=" + seedtest.Path(t)}
	w := proctest.Start(t, cmd)
	for range 3 {
		if got := do(t, "GET", "http://"+w.Addr+"/feed", "", ""); got.status != 200 {
			t.Fatalf("GET /feed: %d", got.status)
		}
	}
	if err := w.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("worker exit after SIGTERM: %v", err)
	}
	for _, f := range []struct{ path, head string }{{block, "\x1f\x8b"}, {mutex, "\x1f\x8b"}, {trace, "go 1."}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), f.head) {
			t.Errorf("%s starts %q, want %q", f.path, b[:min(len(b), 8)], f.head)
		}
	}
}

func TestOfficialChecks(t *testing.T) { forTransports(t, testOfficialChecks) }

func testOfficialChecks(t *testing.T, transport string) {
	w := startWorker(t, "TRANSPORT="+transport, "SQLITE_PATH="+seedtest.Path(t))
	officialChecks(t, "http://"+w.Addr)
}

func TestSIGTERMDrainsAndExits(t *testing.T) { forTransports(t, testSIGTERMDrainsAndExits) }

func testSIGTERMDrainsAndExits(t *testing.T, transport string) {
	w := startWorker(t, "TRANSPORT="+transport, "SQLITE_PATH="+seedtest.Path(t))
	c, err := net.Dial("tcp", w.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	if line, _ := br.ReadString('\n'); !strings.Contains(line, "200") {
		t.Fatalf("health: %q", line)
	}
	start := time.Now()
	if err := w.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("worker exit after SIGTERM: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("drain with one idle keep-alive took %v, want well under the 5 s deadline", d)
	}
	if !strings.Contains(w.Logs(), `"msg":"stopped"`) {
		t.Errorf("no clean stop in the logs:\n%s", w.Logs())
	}
	for _, line := range strings.Split(strings.TrimSpace(w.Logs()), "\n") {
		if !strings.Contains(line, `"worker":`) || !strings.Contains(line, `"pid":`) {
			t.Errorf("log line without worker id and pid: %s", line)
		}
	}
}
