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
	if got, want := strings.Join(c.SSHCommand(h, "true"), " "), "ssh -o BatchMode=yes -o IdentityFile=/k -p 2200 u@h true"; got != want {
		t.Errorf("ssh: got %q, want %q", got, want)
	}
	if got, want := strings.Join(c.SCPCommand(h, "/a", ":/b"), " "), "scp -q -o BatchMode=yes -o IdentityFile=/k -P 2200 /a u@h:/b"; got != want {
		t.Errorf("scp: got %q, want %q", got, want)
	}
	if got, want := Quote("it's"), `'it'\''s'`; got != want {
		t.Errorf("quote: got %s, want %s", got, want)
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
