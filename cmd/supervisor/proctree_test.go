package main

// A worker's whole process tree, with a program that knows nothing of the supervisor
// (testdata/programs/forker.py): it goes when the supervisor is killed -9, its process
// group gets SIGKILL at kill_timeout even after its leader exited, and later workers still
// start through the shim after the supervisor's binary was removed.

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/proctest"
)

// forker is the command line of testdata/programs/forker.py.
func forker(t *testing.T) []string {
	t.Helper()
	proctest.Need(t, "python3")
	p, err := filepath.Abs("testdata/programs/forker.py")
	if err != nil {
		t.Fatal(err)
	}
	return []string{"python3", p}
}

// portFree reports whether addr can be bound without SO_REUSEPORT: no socket of the
// supervisor's group is left open anywhere.
func portFree(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// copyTestBinary copies the test binary into a directory of its own, so that the copy can
// be removed while it runs.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "supervisor")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSupervisorKill9StopsSilentProgram: a program that speaks none of our ipc, in a
// process group of its own, cannot rejoin a new supervisor: `upgrade` refuses, naming it,
// and the program serves on; and it dies with its supervisor (PR_SET_PDEATHSIG) instead of
// serving on unwatched and holding the port.
func TestSupervisorKill9StopsSilentProgram(t *testing.T) {
	t.Parallel()
	cmd := forker(t)
	sp, st := startSupervisorProcess(t, os.Args[0], "instances: 2\nwait_ready: false\n", []string{roleEnv + "=supervisor"}, cmd...)
	pids := workerPIDs(st)
	if code, body, err := fetch("http://"+st.Addr+"/", 5*time.Second); err != nil || code != 200 {
		t.Fatalf("GET /: %d %q %v", code, body, err)
	}
	if out, err := sp.ctl.cmd("upgrade"); err == nil || !strings.Contains(out+err.Error(), "whose workers cannot rejoin a new supervisor") {
		t.Errorf("upgrade with a program that does not speak our ipc: %v %s, want it refused", err, out)
	}
	if after, err := sp.ctl.status(); err != nil || !slices.Equal(workerPIDs(after), pids) {
		t.Errorf("after the refused upgrade: %+v %v, want the same programs %v", after.Workers, err, pids)
	}
	if err := sp.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitUntil(t, 5*time.Second, "the programs gone and the port free after kill -9 of the supervisor", func() bool {
		for _, pid := range pids {
			if !processGone(pid) {
				return false
			}
		}
		return portFree(st.Addr)
	})
	t.Logf("programs %v gone and %s free %v after kill -9", pids, st.Addr, time.Since(killed).Round(time.Millisecond))
}

// TestShimAfterBinaryRemoved: the supervisor starts its workers through itself (the
// LISTEN_PID shim) by /proc/self/exe, so a reload after its binary was removed (a rebuild
// of bin/) still starts them.
func TestShimAfterBinaryRemoved(t *testing.T) {
	t.Parallel()
	cmd := forker(t)
	bin := copyTestBinary(t)
	sp, st := startSupervisorProcess(t, bin, "instances: 1\nwait_ready: false\n", []string{roleEnv + "=supervisor"}, cmd...)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if out, err := sp.ctl.cmd("reload"); err != nil {
		t.Fatalf("reload after the binary was removed: %v %s", err, out)
	}
	after, err := sp.ctl.status()
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Workers) != 1 || after.Workers[0].PID == st.Workers[0].PID || after.Workers[0].Status != "online" {
		t.Fatalf("after reload: %+v, want one new worker online (was pid %d)", after.Workers, st.Workers[0].PID)
	}
	// The program serves, and the shim ran before it: it set LISTEN_PID to the program's
	// pid (read once the program answers: before the shim's exec, environ is the shim's).
	pid := after.Workers[0].PID
	waitUntil(t, 10*time.Second, "the new worker answers", func() bool {
		code, body, err := fetch("http://"+st.Addr+"/", 2*time.Second)
		return err == nil && code == 200 && strings.TrimSpace(body) == "pid "+strconv.Itoa(pid)
	})
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if want := "LISTEN_PID=" + strconv.Itoa(pid); !strings.Contains("\x00"+string(env)+"\x00", "\x00"+want+"\x00") {
		t.Errorf("new worker's environment lacks %s: the shim did not run", want)
	}
}

// TestKillTimeoutKillsProcessGroup: whatever a worker forked goes at kill_timeout, by
// SIGKILL to its process group: when the worker ignores SIGTERM (stop), when it exits on
// SIGTERM but its child ignores it (reload), and when it is killed -9 and its child ignores
// SIGTERM (a crash).
func TestKillTimeoutKillsProcessGroup(t *testing.T) {
	const killTimeout = 2 * time.Second
	tests := []struct {
		name, termMode, action string
	}{
		{"worker ignores SIGTERM, stop", "ignore", "stop"},
		{"worker exits on SIGTERM, its child does not, stop", "child", "stop"},
		{"worker exits on SIGTERM, its child does not, reload", "child", "reload"},
		{"worker killed -9, its child ignores SIGTERM", "ignore", "kill9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := forker(t)
			pidDir := t.TempDir()
			c := startRun(t, "instances: 1\nwait_ready: false\nkill_timeout: "+killTimeout.String()+"\n"+
				"env: {FORK: '1', TERM_MODE: "+tc.termMode+", PID_DIR: "+strconv.Quote(pidDir)+"}\n",
				append([]string{"--"}, cmd...)...)
			st, err := c.status()
			if err != nil {
				t.Fatal(err)
			}
			leader := st.Workers[0].PID
			var child int
			waitUntil(t, 10*time.Second, "the worker wrote its child's pid", func() bool {
				b, err := os.ReadFile(filepath.Join(pidDir, strconv.Itoa(leader)))
				child, _ = strconv.Atoi(string(b))
				return err == nil && child > 0
			})
			start := time.Now()
			switch tc.action {
			case "stop":
				// stop returns, and the supervisor with it, only once the worker's whole
				// group is gone: nothing is left to outlive it and hold the port.
				go c.cmd("stop")
				select {
				case err := <-c.done:
					c.done <- err // for the cleanup's check
				case <-time.After(killTimeout + 10*time.Second):
					t.Fatal("run did not return after stop")
				}
				if !processGone(leader) || !processGone(child) {
					t.Errorf("the supervisor stopped with its worker %d or the worker's child %d still running", leader, child)
				}
			case "reload":
				if out, err := c.cmd("reload"); err != nil {
					t.Fatalf("reload: %v %s", err, out)
				}
			case "kill9":
				if err := syscall.Kill(leader, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			if tc.action != "stop" {
				waitUntil(t, 5*time.Second, "the worker exited", func() bool { return processGone(leader) })
				if processGone(child) {
					t.Fatalf("child %d went with its parent %d: the test needs it left behind", child, leader)
				}
			}
			waitUntil(t, killTimeout+5*time.Second, "the worker and its child gone", func() bool {
				return processGone(leader) && processGone(child)
			})
			if took := time.Since(start); took < killTimeout-100*time.Millisecond {
				t.Errorf("child gone after %v, before kill_timeout %v: want SIGTERM ignored until then", took, killTimeout)
			}
			if tc.action == "stop" {
				return
			}
			// The slot still serves (a reload's successor, a crash's restart).
			waitUntil(t, 10*time.Second, "a worker answers", func() bool {
				code, _, err := fetch("http://"+st.Addr+"/", 2*time.Second)
				return err == nil && code == 200
			})
		})
	}
}
