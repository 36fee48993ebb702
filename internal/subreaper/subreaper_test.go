package subreaper

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/procstat"
)

// TestOrphanAdoptedAndReaped: a child's double-forked descendant (a shell in a session of
// its own that leaves a job behind and exits) becomes this process's child instead of
// init's while it runs, and is reaped once it exits; the children this process started and
// waits for itself, late, keep their exit statuses (the reaper took none of them).
func TestOrphanAdoptedAndReaped(t *testing.T) {
	r, err := Start(Config{Interval: 20 * time.Millisecond, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	// Children of ours, waited for only after the reaper has seen them as zombies for a
	// while: one in our process group, one leading its own.
	late := []*exec.Cmd{exec.Command("sh", "-c", "exit 3"), exec.Command("sh", "-c", "exit 4")}
	late[1].SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, c := range late {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}

	pidFile := t.TempDir() + "/orphan"
	daemon := exec.Command("sh", "-c", `setsid sh -c 'sleep 0.5 >/dev/null 2>&1 & echo $! >`+pidFile+`'`)
	if out, err := daemon.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var orphan int
	for deadline := time.Now().Add(5 * time.Second); orphan == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		orphan, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if orphan == 0 {
		t.Fatal("the double-forked job never wrote its pid")
	}
	// Its shell has exited: the job is ours now, not init's.
	var adopted bool
	for deadline := time.Now().Add(5 * time.Second); !adopted && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		kids, _ := procstat.Children("", os.Getpid())
		adopted = slices.Contains(kids, orphan)
		if l, err := procstat.ReadLineage("", orphan); err != nil || l.Zombie {
			break // already gone
		}
	}
	if !adopted {
		t.Fatalf("orphan %d never became this process's child", orphan)
	}
	for deadline := time.Now().Add(10 * time.Second); r.Reaped() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d not reaped", orphan)
		}
	}
	if _, err := procstat.ReadLineage("", orphan); err == nil {
		t.Errorf("orphan %d still in /proc after it was reaped", orphan)
	}

	time.Sleep(200 * time.Millisecond) // the late ones: zombies over several sweeps
	for i, c := range late {
		err := c.Wait()
		if c.ProcessState == nil || c.ProcessState.ExitCode() != 3+i {
			t.Errorf("late child %d: Wait = %v, state %v: want exit status %d (the reaper took it?)", i, err, c.ProcessState, 3+i)
		}
	}
}

// TestGraceReapsTheUnwaited: a child of ours that nobody waits for is reaped after Grace.
func TestGraceReapsTheUnwaited(t *testing.T) {
	r, err := Start(Config{Interval: 20 * time.Millisecond, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := exec.Command("true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); r.Reaped() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an unwaited zombie child was not reaped after Grace")
		}
	}
	c.Process.Release()
}
