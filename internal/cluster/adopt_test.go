package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
)

// prober does one request on a fresh connection every millisecond until stopped, and
// counts what failed (refused, reset, no answer).
type prober struct {
	ok, failed atomic.Int64
	lastErr    atomic.Value
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startProber(addr string) *prober {
	p := &prober{stop: make(chan struct{})}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(time.Millisecond):
			}
			resp, err := c.Get("http://" + addr + "/")
			if err != nil {
				p.failed.Add(1)
				p.lastErr.Store(err.Error())
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				p.failed.Add(1)
				continue
			}
			p.ok.Add(1)
		}
	}()
	return p
}

func (p *prober) end() (ok, failed int64, last any) {
	close(p.stop)
	p.wg.Wait()
	return p.ok.Load(), p.failed.Load(), p.lastErr.Load()
}

// TestAdoptAfterSupervisorKill9: the supervisor is killed with -9 under load; its workers
// serve on, unsupervised; a new supervisor on the same rendezvous adopts every one of them
// (same pids, same sockets) and a rolling reload then replaces them. Nothing fails.
func TestAdoptAfterSupervisorKill9(t *testing.T) {
	t.Parallel()
	rv := filepath.Join(t.TempDir(), "adopt.sock")
	cmd, addr, old := startSupervisorProcess(t, "FAKE_ADOPT="+rv, "FAKE_ADOPT_WAIT=20s")
	pr := startProber(addr)
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	time.Sleep(500 * time.Millisecond) // unsupervised, still serving
	for _, p := range old {
		if gone(p) {
			t.Fatalf("worker %d died with its supervisor", p)
		}
	}
	began := time.Now()
	s, logs := startClusterOpts(t, Config{Instances: 2, Listen: addr}, Options{Adopt: rv})
	took := time.Since(began)
	var pids []int
	for _, r := range s.Status() {
		pids = append(pids, r.PID)
		if r.Status != StateOnline {
			t.Errorf("adopted worker %+v not online", r)
		}
	}
	if !slices.Equal(pids, old) {
		t.Fatalf("pids after adoption %v, want the old workers %v", pids, old)
	}
	if took > 2*time.Second {
		t.Errorf("adoption took %v, want within the window (at most %v)", took, adoptWindowMax)
	}
	waitFor(t, 5*time.Second, "the adopted workers' output through the new pipe", func() bool {
		return strings.Count(logs.String(), "fake worker adopted") == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the adopted workers gone after the reload", func() bool { return gone(old[0]) && gone(old[1]) })
	time.Sleep(100 * time.Millisecond)
	if ok, failed, last := pr.end(); failed != 0 || ok == 0 {
		t.Errorf("requests: %d ok, %d failed (last error %v), want none failed", ok, failed, last)
	}
}

// TestAbandonedWorkersExit: without a new supervisor, the workers of a killed one drain and
// exit after adopt_wait.
func TestAbandonedWorkersExit(t *testing.T) {
	t.Parallel()
	rv := filepath.Join(t.TempDir(), "adopt.sock")
	cmd, _, old := startSupervisorProcess(t, "FAKE_ADOPT="+rv, "FAKE_ADOPT_WAIT=1s")
	cmd.Process.Kill()
	cmd.Wait()
	time.Sleep(500 * time.Millisecond)
	if gone(old[0]) || gone(old[1]) {
		t.Fatal("workers died before adopt_wait")
	}
	waitFor(t, 10*time.Second, "abandoned workers gone", func() bool { return gone(old[0]) && gone(old[1]) })
}

// TestAdoptRefusesFarSlot: a worker at the rendezvous claiming a slot past the configured
// count, with the slots between empty, is asked to drain and the cluster keeps its size:
// one claiming slot 1023 once grew it to 1,024 slots, the empty ones started anew. (The
// adoptee is this test process: its pid and start time are real, as checkAdoptee wants.)
func TestAdoptRefusesFarSlot(t *testing.T) {
	t.Parallel()
	rv := filepath.Join(t.TempDir(), "adopt.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: rv, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close() // left behind, as by a supervisor killed -9
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lf, _ := ln.(*net.TCPListener).File()
	defer lf.Close()
	started, err := procstat.StartTime("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rejoined := make(chan error, 1)
	go func() {
		c, _, err := ipc.Rejoin(context.Background(), rv, ipc.Hello{PID: os.Getpid(), Slot: 7, Started: started}, lf, 10*time.Second)
		if c != nil {
			c.Close()
		}
		rejoined <- err
	}()
	s, logs := startClusterOpts(t, Config{Instances: 2}, Options{Adopt: rv})
	select {
	case err := <-rejoined:
		if !errors.Is(err, ipc.ErrDrain) {
			t.Errorf("Rejoin of slot 7 = %v, want asked to drain", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Rejoin did not return")
	}
	if st := s.Status(); len(st) != 2 {
		t.Errorf("%d slots after a claim of slot 7, want the configured 2", len(st))
	}
	if !strings.Contains(logs.String(), "past the configured count") {
		t.Errorf("no log line for the refusal:\n%s", logs)
	}
}

// TestAdoptRefusesOtherUser: a root supervisor adopts no process of another user, however
// well it plays a worker (its own pid and start time, a listening socket passed): a root
// supervisor once took any uid's. The other user's process is a copy of this test binary
// run as uid 65534; checkAdoptee gets the connection to it. Skipped unless root.
func TestAdoptRefusesOtherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("runs a process as uid 65534: needs root (CI runs as root)")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o777)
	}
	bin := filepath.Join(dir, "helper")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "adoptee.sock")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), roleEnv+"=nobody-adoptee", "ADOPTEE_LISTEN="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var uc *net.UnixConn
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("unix", path); err == nil {
			uc = c.(*net.UnixConn)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the adoptee as nobody did not start: %s", &out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer uc.Close()
	log, _ := testLogger(t)
	s, err := New(Config{Instances: 1, Listen: "127.0.0.1:0", Command: []string{os.Args[0]}}, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.checkAdoptee(uc)
	if err == nil {
		a.socket.Close()
		t.Fatalf("a process of uid 65534 was taken as a worker (pid %d)", a.hello.PID)
	}
	if !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("checkAdoptee = %v, want it refused for its uid", err)
	}
}

// nobodyAdoptee plays a worker at the rendezvous, the other way round: it listens at
// ADOPTEE_LISTEN, and sends its true hello and a listening socket to whoever connects.
func nobodyAdoptee() {
	path := os.Getenv("ADOPTEE_LISTEN")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	os.Chmod(path, 0o777)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(2)
	}
	lf, _ := tl.(*net.TCPListener).File()
	started, _ := procstat.StartTime("", os.Getpid())
	line, _ := json.Marshal(ipc.Hello{Type: ipc.TypeAdopt, PID: os.Getpid(), Slot: 0, Started: started, Proto: ipc.Proto()})
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			os.Exit(2)
		}
		uc.WriteMsgUnix(append(line, '\n'), syscall.UnixRights(int(lf.Fd())), nil)
		io.Copy(io.Discard, uc)
		uc.Close()
	}
}
