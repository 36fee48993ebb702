package proctest

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// Zombie starts a child that exits at once and waits for its exit without reaping it: until
// reap is called the pid is a zombie (state Z), which kill(pid, 0) still answers for.
// Cleanup reaps it if the test has not.
func Zombie(t testing.TB) (pid int, reap func()) {
	t.Helper()
	child := exec.Command("true")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, child.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		child.Wait()
		t.Fatal(err)
	}
	reap = func() { child.Wait() } // a second Wait returns at once with an error
	t.Cleanup(reap)
	return child.Process.Pid, reap
}
