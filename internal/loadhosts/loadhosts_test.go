package loadhosts

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/loadhosts/nstest"
)

// The test binary is also the "generator" the hosts run: `loadhosts-helper get URL N OUT`
// makes N requests and writes how many succeeded to OUT; `loadhosts-helper sleep MARK`
// waits to be killed.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "loadhosts-helper" {
		os.Exit(helper(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func helper(args []string) int {
	switch args[0] {
	case "get":
		n, _ := strconv.Atoi(args[2])
		ok := 0
		for range n {
			resp, err := http.Get(args[1])
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok++
				}
			}
		}
		if err := os.WriteFile(args[3], []byte(strconv.Itoa(ok)), 0o644); err != nil {
			return 1
		}
		return 0
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	}
	return 2
}

func TestParseHosts(t *testing.T) {
	tests := []struct {
		name, in string
		want     []Host
		wantErr  bool
	}{
		{"one", "root@10.0.0.2", []Host{{User: "root", Addr: "10.0.0.2"}}, false},
		{"port and two", "a@h1:2222, h2", []Host{{User: "a", Addr: "h1", Port: 2222}, {Addr: "h2"}}, false},
		{"bad port", "a@h1:x", nil, true},
		{"empty", " , ", nil, true},
		{"quote", "a@h'1", nil, true},
		{"hyphen inside", "load-user@load-1.example", []Host{{User: "load-user", Addr: "load-1.example"}}, false},
		// A leading "-" is an ssh option: -oProxyCommand runs a command on this machine.
		{"ssh option as host", "-oProxyCommand=touch${IFS}x", nil, true},
		{"ssh option with a slash", "-oProxyCommand=touch${IFS}/tmp/x", nil, true},
		{"ssh option after a good host", "root@10.0.0.2,-F/dev/null", nil, true},
		{"ssh option as user", "-oProxyCommand=x@h", nil, true},
		{"host begins with -", "u@-h", nil, true},
		{"port flag as host", "-p:22", nil, true},
		{"shell in host", "h$(id)", nil, true},
		{"two @", "a@b@h", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHosts(tc.in)
			if (err != nil) != tc.wantErr || !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseHosts(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestCommands(t *testing.T) {
	c := Config{Options: []string{"IdentityFile=/k"}}
	h := Host{User: "u", Addr: "h", Port: 2200}
	if got, want := strings.Join(c.SSHCommand(h, "true"), " "), "ssh -o BatchMode=yes -o IdentityFile=/k -p 2200 -- u@h true"; got != want {
		t.Errorf("ssh: got %q, want %q", got, want)
	}
	if got, want := strings.Join(c.SCPCommand(h, "/a", ":/b"), " "), "scp -q -o BatchMode=yes -o IdentityFile=/k -P 2200 -- /a u@h:/b"; got != want {
		t.Errorf("scp: got %q, want %q", got, want)
	}
	if got, want := Quote("it's"), `'it'\''s'`; got != want {
		t.Errorf("quote: got %s, want %s", got, want)
	}
}

// TestKillPID runs the kill command on pid files of every shape with sh, kill replaced by
// a function that says what it was asked: only a plain number above 1 is signalled.
func TestKillPID(t *testing.T) {
	tests := []struct {
		name, content, want string // want: the kill's arguments, "" for none
	}{
		{"a pid", "4242\n", "-TERM 4242"},
		{"minus one: every process", "-1\n", ""},
		{"zero: the process group", "0\n", ""},
		{"init", "1\n", ""},
		{"leading zero", "01\n", ""},
		{"negative group", "-4242\n", ""},
		{"empty", "", ""},
		{"two pids", "12 34\n", ""},
		{"two lines", "12\n34\n", ""},
		{"a command", "4242; touch x\n", ""},
		{"an option", "-KILL\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "run.pid")
			if err := os.WriteFile(pidFile, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("sh", "-c", `kill() { echo "$*"; }; `+killPID(pidFile)).Output()
			if got := strings.TrimSpace(string(out)); got != tc.want {
				t.Errorf("pid file %q: kill %q (%v), want %q", tc.content, got, err, tc.want)
			}
		})
	}
}

// TestOwnDir runs the remote directory check with sh: a missing directory is made mode
// 0700, one of the user's own is kept (and made 0700), a link or another user's is refused.
func TestOwnDir(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		refused bool
	}{
		{"missing", func(t *testing.T, dir string) {}, false},
		{"own, open to others", func(t *testing.T, dir string) { mkdir(t, dir, 0o777) }, false},
		{"a link to an own directory", func(t *testing.T, dir string) {
			mkdir(t, dir+".real", 0o700)
			if err := os.Symlink(dir+".real", dir); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a file", func(t *testing.T, dir string) { os.WriteFile(dir, nil, 0o600) }, true},
		{"another user's", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to make a directory of another user")
			}
			mkdir(t, dir, 0o777)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "onehost-load")
			tc.setup(t, dir)
			out, err := exec.Command("sh", "-c", ownDir(dir)+" && echo ok").CombinedOutput()
			if tc.refused {
				if err == nil || !strings.Contains(string(out), "is not") {
					t.Fatalf("accepted (%v): %s", err, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v: %s", err, out)
			}
			if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("after the check: %v, %v; want a directory of mode 0700", st.Mode(), err)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestTwoHostsOverSSH runs the generator (this test binary, copied over) on two hosts
// made of network namespaces, each with its own sshd, against a server on this side of
// the veths, fetches their result files and counts every request; then cancels a
// running remote process and checks it is gone.
func TestTwoHostsOverSSH(t *testing.T) {
	ns := nstest.New(t, 2)
	hosts, err := ParseHosts(strings.Join(ns.Specs, ","))
	if err != nil {
		t.Fatal(err)
	}
	addrs := ns.Local
	dir := ns.Dir

	var served atomic.Int64
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	c := Config{
		Options:   ns.Options,
		RemoteDir: filepath.Join(dir, "remote"),
		KillWait:  5 * time.Second,
	}
	ctx := context.Background()
	self, _ := os.Executable()
	results := make([]error, len(hosts))
	done := make(chan int)
	for i, h := range hosts {
		go func() {
			defer func() { done <- i }()
			bin, err := c.EnsureBinary(ctx, h, self, "gen")
			if err == nil {
				// The server's address as seen from host i: the root side of its veth.
				url := fmt.Sprintf("http://%s:%d/", addrs[i], port)
				out := c.RemoteDir + "/out" + strconv.Itoa(i)
				err = c.Run(ctx, h, []string{bin, "loadhosts-helper", "get", url, strconv.Itoa(100 * (i + 1)), out}, nil, nil)
				if err == nil {
					err = c.Fetch(ctx, h, out, filepath.Join(dir, "got"+strconv.Itoa(i)))
				}
			}
			results[i] = err
		}()
	}
	for range hosts {
		<-done
	}
	total := 0
	for i, err := range results {
		if err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "got"+strconv.Itoa(i)))
		n, _ := strconv.Atoi(string(b))
		total += n
	}
	if total != 300 || served.Load() != 300 {
		t.Errorf("hosts counted %d requests, the server %d; want 300", total, served.Load())
	}

	// A second EnsureBinary finds the same binary there and copies nothing: the remote
	// file's time is unchanged.
	bin := filepath.Join(c.RemoteDir, "gen")
	before, _ := os.Stat(bin)
	if _, err := c.EnsureBinary(ctx, hosts[0], self, "gen"); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(bin); !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("EnsureBinary copied an identical binary again")
	}

	// Cancel: the remote process is killed, Run returns.
	cctx, cancel := context.WithCancel(ctx)
	mark := "mark" + strconv.Itoa(rand.Int())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(cctx, hosts[1], []string{bin, "loadhosts-helper", "sleep", mark}, nil, nil) }()
	for deadline := time.Now().Add(10 * time.Second); !running(mark); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the remote process did not start")
		}
	}
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("Run returned no error after cancel")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for deadline := time.Now().Add(5 * time.Second); running(mark); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the remote process is still running after cancel")
		}
	}
}

// running reports whether a process with mark in its command line exists (the "hosts"
// share this machine's process table).
func running(mark string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), mark) && strings.Contains(string(b), "loadhosts-helper") {
			return true
		}
	}
	return false
}

// TestAt runs At's wrapper here: the command starts no earlier than the agreed time, gets
// its arguments as they were (quotes and spaces kept), and a time already past runs it
// at once.
func TestAt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead time.Duration
	}{
		{"ahead", 300 * time.Millisecond},
		{"past", -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now().Add(tc.ahead)
			argv := At(start, []string{"sh", "-c", `echo "$1|$2"; date +%s%3N`, "x", "it's", "a b"})
			out, err := exec.Command(argv[0], argv[1:]...).Output()
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 2 || lines[0] != "it's|a b" {
				t.Fatalf("output %q: want the arguments as given, then the time", out)
			}
			ms, _ := strconv.ParseInt(lines[1], 10, 64)
			if ms < start.UnixMilli() {
				t.Errorf("ran at %d, before the agreed %d", ms, start.UnixMilli())
			}
		})
	}
}

// FuzzParseHosts: whatever the flag holds, a host that parses never reaches ssh or scp as
// an option, and its target holds nothing a shell or ssh would interpret.
func FuzzParseHosts(f *testing.F) {
	for _, s := range []string{"root@10.0.0.2", "a@h1:2222, h2", "-oProxyCommand=x", "u@-h", "a@b@h", "h:0", " , "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHosts(s)
		if err != nil {
			return
		}
		for _, h := range hosts {
			target := h.target()
			if strings.HasPrefix(target, "-") || strings.Count(target, "@") > 1 ||
				!plainName(strings.Replace(target, "@", "", 1)) {
				t.Fatalf("ParseHosts(%q) accepted %q", s, target)
			}
		}
	})
}
