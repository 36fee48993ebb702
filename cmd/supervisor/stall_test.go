package main

// The supervisor under its own faults: stopped (SIGSTOP: what a paused VM, a swap storm or
// an attached debugger does to it) while its workers serve, and while a reload waits for a
// new worker. The supervisor runs as its own process, so that stopping it stops nothing
// else.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster/clustertest"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/seedtest"
)

// supervisorProcess runs the supervisor binary with config and the given worker command
// until the test ends, and waits until every worker is online.
type supervisorProcess struct {
	cmd  *exec.Cmd
	ctl  *runningCluster
	logs *syncBuffer
}

func startSupervisorProcess(t *testing.T, bin, config string, env []string, command ...string) (*supervisorProcess, control.Status) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := &supervisorProcess{ctl: &runningCluster{socket: filepath.Join(dir, "s.sock")}, logs: &syncBuffer{}}
	for try := 0; ; try++ {
		sp.cmd = exec.Command(bin, append([]string{"run", "-config", cfg, "-socket", sp.ctl.socket, "-listen", "127.0.0.1:0", "--"}, command...)...)
		sp.cmd.Env = append(os.Environ(), env...)
		sp.cmd.Stderr = sp.logs
		err := sp.cmd.Start()
		if err == nil {
			break
		}
		// A copied binary (copyTestBinary) may be "text file busy" for a moment: a parallel
		// test forked while the copy was open for writing, and its child holds that
		// descriptor until it execs (golang.org/issue/22315). The go command retries too.
		if !errors.Is(err, syscall.ETXTBSY) || try == 50 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		sp.cmd.Process.Signal(syscall.SIGCONT)
		sp.cmd.Process.Signal(syscall.SIGTERM)
		sp.cmd.Wait()
		if t.Failed() {
			t.Logf("supervisor log:\n%s", sp.logs)
		}
	})
	var st control.Status
	waitUntil(t, 60*time.Second, "cluster online", func() bool {
		var err error
		st, err = sp.ctl.status()
		return err == nil && len(st.Workers) > 0 && everyOnline(st)
	})
	return sp, st
}

// stall stops the supervisor process for d.
func (sp *supervisorProcess) stall(t *testing.T, d time.Duration) {
	t.Helper()
	if err := sp.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	if err := sp.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

func workerPIDs(st control.Status) []int {
	var pids []int
	for _, w := range st.Workers {
		pids = append(pids, w.PID)
	}
	return pids
}

// supervisorStall: the supervisor stopped for three heartbeat timeouts while two real
// workers serve /posts/1 kills nobody and fails no request; a worker stopped alone is still
// replaced.
func supervisorStall(t *testing.T, bins binaries) {
	dir := t.TempDir()
	db := seedtest.Tiny(t, dir, false)
	sp, st := startSupervisorProcess(t, bins.supervisor,
		clusterConfig(2, db, filepath.Join(dir, "products.db"), "stats_interval: 200ms\nheartbeat_timeout: 1s\n"), nil, bins.worker)
	before := workerPIDs(st)
	load := clustertest.StartLoad("http://"+st.Addr+"/posts/1", 8)
	time.Sleep(300 * time.Millisecond)
	stalledAt := time.Now()
	sp.stall(t, 3*time.Second)
	time.Sleep(1500 * time.Millisecond) // several heartbeat rounds after the resume
	load.Finish(t)
	after, err := sp.ctl.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range after.Workers {
		if w.Restarts != 0 {
			t.Errorf("worker %d: %d restarts after the supervisor's stall, want 0", w.ID, w.Restarts)
		}
	}
	if got := workerPIDs(after); !slices.Equal(got, before) {
		t.Errorf("workers %v after the stall, want the same %v", got, before)
	}
	if !strings.Contains(sp.logs.String(), "supervisor was not running") {
		t.Error("the stall was not logged")
	}
	t.Logf("supervisor stopped 3 s (heartbeat_timeout 1 s) under load at %s: 0 restarts", stalledAt.Format("15:04:05.000"))

	// A worker that is really silent is still replaced, and only it.
	victim := before[0]
	stoppedAt := time.Now()
	if err := syscall.Kill(victim, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var now control.Status
	waitUntil(t, 15*time.Second, "the stopped worker replaced", func() bool {
		now, err = sp.ctl.status()
		return err == nil && now.Workers[0].PID != victim && now.Workers[0].Status == "online"
	})
	if now.Workers[1].PID != before[1] {
		t.Errorf("worker 1 replaced too (pid %d, was %d)", now.Workers[1].PID, before[1])
	}
	t.Logf("a worker stopped alone: replaced after %v", time.Since(stoppedAt).Round(10*time.Millisecond))
}

// supervisorStallDuringReload: the supervisor stopped longer than listen_timeout while a
// reload waits for a new worker; the worker said ready meanwhile, so the reload goes on
// when the supervisor does, and no request fails.
func supervisorStallDuringReload(t *testing.T, bins binaries) {
	env := []string{roleEnv + "=worker", "FAKE_READY_DELAY_MS=300", "GORACE=atexit_sleep_ms=0"}
	// wait_ready: the reload waits for the worker's ready, 300 ms after its start, which
	// the stall below overlaps (without it the worker is ready at start and the reload is
	// over before the stall begins, testing nothing). listen_timeout 2 s: shorter than the
	// stall, and long enough for slot 1's new worker, a -race binary started after the
	// stall on a loaded machine (1 s was not, once in CI).
	sp, st := startSupervisorProcess(t, bins.supervisor, "instances: 2\nwait_ready: true\nlisten_timeout: 2s\n", env, os.Args[0])
	before := workerPIDs(st)
	load := clustertest.StartLoad("http://"+st.Addr+"/", 4)
	reloaded := make(chan error, 1)
	go func() {
		out, err := sp.ctl.cmd("reload")
		if err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
		reloaded <- err
	}()
	time.Sleep(100 * time.Millisecond) // slot 0's new worker is starting: ready in ~200 ms
	sp.stall(t, 4*time.Second)
	select {
	case err := <-reloaded:
		if err != nil {
			t.Errorf("reload after the stall: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("reload did not return")
	}
	load.Finish(t)
	after, err := sp.ctl.status()
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range after.Workers {
		if w.PID == before[i] || w.Status != "online" {
			t.Errorf("worker %d after the reload: %+v, want a new pid online", i, w)
		}
	}
	// The log comes through a pipe copied by another goroutine: give it a moment.
	stalled, done := -1, -1
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		logs := sp.logs.String()
		if stalled, done = strings.Index(logs, "supervisor was not running"), strings.Index(logs, "reload done"); stalled >= 0 && done >= 0 {
			break
		}
	}
	if stalled < 0 {
		t.Error("the stall was not logged")
	}
	if done < 0 {
		t.Error("the reload's end was not logged")
	} else if stalled > done {
		t.Error("the reload was done before the stall: it did not wait across it")
	}
}
