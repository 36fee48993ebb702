package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/seedtest"
)

// loadProbe sends requests until stopped: one goroutine a fresh connection every
// millisecond, two on keep-alive connections; it counts every failure (refused, reset, no
// answer, not 200).
type loadProbe struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startLoadProbe(url string) *loadProbe {
	p := &loadProbe{stop: make(chan struct{})}
	run := func(c *http.Client, every time.Duration) {
		defer p.wg.Done()
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(every):
			}
			resp, err := c.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				p.failed.Add(1)
				p.mu.Lock()
				if len(p.errs) < 5 {
					p.errs = append(p.errs, err.Error())
				}
				p.mu.Unlock()
				continue
			}
			p.ok.Add(1)
		}
	}
	p.wg.Add(3)
	go run(&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}, time.Millisecond)
	for range 2 {
		go run(&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}, 0)
	}
	return p
}

func (p *loadProbe) end(t *testing.T) {
	t.Helper()
	close(p.stop)
	p.wg.Wait()
	if p.failed.Load() != 0 || p.ok.Load() == 0 {
		t.Errorf("requests: %d ok, %d failed (%v), want none failed", p.ok.Load(), p.failed.Load(), p.errs)
	}
	t.Logf("requests: %d ok, 0 failed", p.ok.Load())
}

// startSupervisorBin runs the supervisor binary in a process of its own, with command as
// its workers' program (none: the worker beside it).
func startSupervisorBin(t *testing.T, supervisor, cfg, socket, listen string, command ...string) *exec.Cmd {
	t.Helper()
	return startSupervisorBinIn(t, "", supervisor, cfg, socket, listen, command...)
}

// startSupervisorBinIn is startSupervisorBin in the working directory wd ("": this one).
func startSupervisorBinIn(t *testing.T, wd, supervisor, cfg, socket, listen string, command ...string) *exec.Cmd {
	t.Helper()
	args := []string{"-config", cfg, "-socket", socket, "-listen", listen}
	if len(command) > 0 {
		args = append(append(args, "--"), command...)
	}
	return startSupervisorArgsIn(t, wd, supervisor, args...)
}

// startSupervisorArgs runs `supervisor run ARGS...` in a process of its own.
func startSupervisorArgs(t *testing.T, supervisor string, args ...string) *exec.Cmd {
	t.Helper()
	return startSupervisorArgsIn(t, "", supervisor, args...)
}

// startSupervisorArgsIn is startSupervisorArgs in the working directory wd ("": this one).
func startSupervisorArgsIn(t *testing.T, wd, supervisor string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(supervisor, append([]string{"run"}, args...)...)
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		// Bounded, so that a supervisor that does not stop shows its log rather than
		// hanging the package until go test's own timeout.
		waited := make(chan struct{})
		go func() { cmd.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(time.Minute):
			t.Logf("supervisor %d did not stop within a minute of SIGTERM: killed", cmd.Process.Pid)
			cmd.Process.Kill()
			<-waited
		}
		if t.Failed() {
			t.Logf("supervisor %d log:\n%s", cmd.Process.Pid, logs)
		}
	})
	return cmd
}

// adoptable is a cluster of two real workers under a real supervisor process, under the
// probe's load.
type adoptable struct {
	cfg, sock, listen string
	worker, wd        string // the workers' command and the supervisor's working directory
	ctl               *runningCluster
	first             *exec.Cmd
	old               []int // the workers' pids
	probe             *loadProbe
}

// Where the worker program lies for an adoption case (kill -9 survival no longer depends
// on it: the worker clears its own parent-death signal).
const (
	workerBeside    = "beside the supervisor"
	workerElsewhere = "in another directory"
	workerRelative  = "named by a relative path"
)

// placeWorker puts a copy of the worker where says and returns the command naming it and
// the working directory the supervisor runs in ("": the test's).
func placeWorker(t *testing.T, bins binaries, where string) (command, wd string) {
	t.Helper()
	if where == workerBeside {
		return bins.worker, ""
	}
	wd = t.TempDir()
	b, err := os.ReadFile(bins.worker)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(wd, "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(wd, "bin", "worker"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if where == workerRelative {
		return "./bin/worker", wd
	}
	return filepath.Join(wd, "bin", "worker"), ""
}

func startAdoptable(t *testing.T, bins binaries) adoptable {
	t.Helper()
	return startAdoptableAt(t, bins, workerBeside)
}

func startAdoptableAt(t *testing.T, bins binaries, where string) adoptable {
	t.Helper()
	dir := t.TempDir()
	db := seedtest.Tiny(t, dir, false)
	c := adoptable{cfg: filepath.Join(dir, "cluster.yaml"), sock: filepath.Join(dir, "s.sock"), listen: "127.0.0.1:" + freePort(t)}
	os.WriteFile(c.cfg, []byte(clusterConfig(2, db, filepath.Join(dir, "products.db"), "")), 0o600)
	c.ctl = &runningCluster{socket: c.sock}
	c.worker, c.wd = placeWorker(t, bins, where)
	c.first = startSupervisorBinIn(t, c.wd, bins.supervisor, c.cfg, c.sock, c.listen, c.worker)
	var st control.Status
	waitUntil(t, 60*time.Second, "cluster online", func() bool {
		var err error
		st, err = c.ctl.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st)
	})
	c.old = workerPIDs(st)
	c.probe = startLoadProbe("http://" + c.listen + "/health")
	time.Sleep(300 * time.Millisecond)
	return c
}

// supervisorKill9Adopt: the supervisor is killed with -9 under load; its workers serve on;
// a new supervisor on the same control socket adopts them all (same pids, shown adopted)
// within a second of its start, a rolling reload then replaces them, and a kill -9 of a
// worker after that is restarted as usual. Nothing fails throughout, wherever the worker
// lies (where): once only the worker beside the supervisor survived.
func supervisorKill9Adopt(t *testing.T, bins binaries, where string) {
	c := startAdoptableAt(t, bins, where)
	cfg, sock, listen, ctl, first, old, probe := c.cfg, c.sock, c.listen, c.ctl, c.first, c.old, c.probe
	var st control.Status
	first.Process.Kill()
	first.Wait()
	time.Sleep(500 * time.Millisecond) // unsupervised, and serving
	for _, pid := range old {
		if processGone(pid) {
			t.Fatalf("worker %d died with its supervisor", pid)
		}
	}
	began := time.Now()
	startSupervisorBinIn(t, c.wd, bins.supervisor, cfg, sock, listen, c.worker)
	waitUntil(t, 30*time.Second, "the new supervisor online", func() bool {
		var err error
		st, err = ctl.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st)
	})
	took := time.Since(began)
	if got := workerPIDs(st); !slices.Equal(got, old) || !st.Workers[0].Adopted || !st.Workers[1].Adopted {
		t.Fatalf("after the new supervisor: %+v, want the old workers %v adopted", st.Workers, old)
	}
	t.Logf("adopted %v %v after the new supervisor's start", old, took.Round(time.Millisecond))
	if table, err := ctl.cmd("status"); err != nil || !hasLine(table, "worker 0: adopted (started by the previous supervisor)") {
		t.Errorf("status table: %v\n%s", err, table)
	}
	if out, err := ctl.cmd("reload"); err != nil {
		t.Fatalf("reload of adopted workers: %v\n%s", err, out)
	}
	st, _ = ctl.status()
	for i, w := range st.Workers {
		if w.PID == old[i] || w.Adopted {
			t.Errorf("after reload, slot %d: %+v (old pid %d)", i, w, old[i])
		}
	}
	waitUntil(t, 15*time.Second, "the adopted workers gone", func() bool { return processGone(old[0]) && processGone(old[1]) })
	time.Sleep(200 * time.Millisecond)
	probe.end(t)
}

func hasLine(text, line string) bool {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
}

// socketInode is the inode of a worker's listening socket(s), "" if unreadable.
func socketInode(pid int) string {
	ls, err := procstat.Listeners("", pid)
	if err != nil || len(ls) == 0 {
		return ""
	}
	var s []string
	for _, l := range ls {
		s = append(s, strconv.FormatUint(l.Inode, 10))
	}
	return strings.Join(s, ",")
}

// supervisorUpgrade: 20 upgrades in place under load, alternating two builds: the
// supervisor's pid stays, its image changes, the workers and their sockets stay, nothing
// fails; a binary that is no supervisor is refused and the running one goes on; one that
// runs but cannot take the workers over (incompatible: another rendezvous protocol) gives
// the previous binary back, which takes them, and the upgrade command says why.
func supervisorUpgrade(t *testing.T, a, b, incompatible binaries) {
	dir := t.TempDir()
	db := seedtest.Tiny(t, dir, false)
	cfg := filepath.Join(dir, "cluster.yaml")
	// No command: each image runs the worker beside it, so the upgraded one reloads into
	// its own build's worker.
	os.WriteFile(cfg, []byte(clusterConfig(2, db, filepath.Join(dir, "products.db"), "")), 0o600)
	sock := filepath.Join(dir, "s.sock")
	listen := "127.0.0.1:" + freePort(t)
	ctl := &runningCluster{socket: sock}
	// The binaries an upgrade may execute: the two builds, the incompatible one and the
	// bad ones below (any other is refused: TestUpgradeBinaryChecks).
	bad := filepath.Join(dir, "bad-supervisor")
	os.WriteFile(bad, []byte("#!/bin/sh\n[ \"$1\" = -h ] && { echo 'usage: supervisor run'; exit 0; }\necho 'config: no such field' >&2; exit 1\n"), 0o755)
	groupWritable := filepath.Join(dir, "gw-supervisor")
	os.WriteFile(groupWritable, []byte("#!/bin/sh\necho 'usage: supervisor run'\n"), 0o755)
	os.Chmod(groupWritable, 0o775)
	args := []string{"-config", cfg, "-socket", sock, "-listen", listen}
	for _, bin := range []string{a.supervisor, b.supervisor, incompatible.supervisor, bad, groupWritable, "/bin/true"} {
		args = append(args, "-upgrade-binary", bin)
	}
	cmd := startSupervisorArgs(t, a.supervisor, args...)
	var st control.Status
	waitUntil(t, 60*time.Second, "cluster online", func() bool {
		var err error
		st, err = ctl.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st)
	})
	workers := workerPIDs(st)
	inodes := []string{socketInode(workers[0]), socketInode(workers[1])}
	if inodes[0] == "" || inodes[0] == inodes[1] {
		t.Fatalf("listening sockets %v: want one of its own per worker", inodes)
	}
	probe := startLoadProbe("http://" + listen + "/health")

	// Bad binaries are refused while the running one goes on: one that is no supervisor,
	// one that looks like one but cannot run this configuration, one the command line does
	// not name, and one that others could have written.
	unlisted := filepath.Join(dir, "unlisted-supervisor")
	os.WriteFile(unlisted, []byte("#!/bin/sh\necho 'usage: supervisor run'\n"), 0o755)
	for _, tc := range []struct{ bin, want string }{
		{"/bin/true", "does not print the supervisor's usage"},
		{unlisted, "start it with -upgrade-binary " + unlisted},
		{groupWritable, "is writable by its group or by others"},
		{bad, "run -check with this supervisor's arguments: exit status 1 (config: no such field)"},
		{"relative/supervisor", "relative/supervisor: no such file or directory"},
	} {
		if out, err := ctl.cmd("upgrade", "-binary", tc.bin); err == nil || !strings.Contains(out+err.Error(), tc.want) {
			t.Errorf("upgrade to %s: %v %s, want it refused with %q", tc.bin, err, out, tc.want)
		}
	}
	_, undone := ctl.cmd("upgrade", "-binary", incompatible.supervisor)
	if want := "it speaks rendezvous protocol 1, this supervisor 2"; undone == nil || !strings.Contains(undone.Error(), want) {
		t.Errorf("upgrade to an incompatible binary: %v, want it undone with %q", undone, want)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); exe != a.supervisor {
		t.Fatalf("after the way back: supervisor pid %d runs %q, want %s", cmd.Process.Pid, exe, a.supervisor)
	}
	waitUntil(t, 10*time.Second, "the workers taken back", func() bool {
		var err error
		st, err = ctl.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st) && slices.Equal(workerPIDs(st), workers)
	})
	t.Logf("an incompatible binary undone: %v", undone)
	for i := range 20 {
		bin := b.supervisor
		if i%2 == 1 {
			bin = a.supervisor
		}
		if out, err := ctl.cmd("upgrade", "-binary", bin); err != nil {
			t.Fatalf("upgrade %d to %s: %v\n%s", i, bin, err, out)
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); exe != bin {
			t.Fatalf("upgrade %d: supervisor pid %d runs %q, want %s", i, cmd.Process.Pid, exe, bin)
		}
		st, _ = ctl.status()
		if got := workerPIDs(st); !slices.Equal(got, workers) {
			t.Fatalf("upgrade %d: workers %v, want %v unchanged", i, got, workers)
		}
		for j, w := range workers {
			if in := socketInode(w); in != inodes[j] {
				t.Fatalf("upgrade %d: worker %d's socket %s, was %s", i, w, in, inodes[j])
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	probe.end(t)
}

// supervisorAndWorkerKill9: the supervisor and one worker killed together under load: the
// new supervisor adopts the survivor and starts a new worker in the dead one's slot; what
// fails is only what the dead worker held (its connections, its queue). Then a kill -9 of
// the adopted worker: replaced on its slot, as any worker.
func supervisorAndWorkerKill9(t *testing.T, bins binaries) {
	c := startAdoptable(t, bins)
	cfg, sock, listen, ctl, first, old, probe := c.cfg, c.sock, c.listen, c.ctl, c.first, c.old, c.probe
	var st control.Status
	first.Process.Kill()
	syscall.Kill(old[0], syscall.SIGKILL)
	first.Wait()
	startSupervisorBin(t, bins.supervisor, cfg, sock, listen, bins.worker)
	waitUntil(t, 30*time.Second, "the new supervisor online", func() bool {
		var err error
		st, err = ctl.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st)
	})
	if w := st.Workers; w[0].PID == old[0] || w[0].Adopted || w[1].PID != old[1] || !w[1].Adopted {
		t.Fatalf("after the new supervisor: %+v, want slot 0 new and slot 1 adopted (pid %d)", w, old[1])
	}
	time.Sleep(300 * time.Millisecond)
	close(probe.stop)
	probe.wg.Wait()
	// The dead worker's keep-alive connections (at most the probe's two), the request in
	// flight on a fresh connection, and what waited in its socket's queue when it died.
	if f := probe.failed.Load(); f > 8 || probe.ok.Load() == 0 {
		t.Errorf("requests: %d ok, %d failed (%v), want at most what the dead worker held", probe.ok.Load(), f, probe.errs)
	}
	t.Logf("requests: %d ok, %d failed with the worker (%v)", probe.ok.Load(), probe.failed.Load(), probe.errs)

	syscall.Kill(old[1], syscall.SIGKILL)
	waitUntil(t, 20*time.Second, "the adopted worker replaced on its slot", func() bool {
		st, _ = ctl.status()
		return len(st.Workers) == 2 && everyOnline(st) && st.Workers[1].PID != old[1] && !st.Workers[1].Adopted && st.Workers[1].Restarts == 1
	})
}
