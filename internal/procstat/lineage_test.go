package procstat

import (
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/onehost/onehost/internal/proctest"
)

func TestReadLineage(t *testing.T) {
	got, err := ReadLineage("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	start, _ := StartTime("", os.Getpid())
	if want := (Lineage{PPID: os.Getppid(), PGID: syscall.Getpgrp(), Start: start}); got != want {
		t.Errorf("ReadLineage(self) = %+v, want %+v", got, want)
	}
	if _, err := ReadLineage(t.TempDir(), 1); err == nil {
		t.Error("ReadLineage of a missing process: nil error")
	}
}

// TestChildren: a zombie child (exited, not reaped) is listed, and read as a zombie.
func TestChildren(t *testing.T) {
	pid, _ := proctest.Zombie(t)
	kids, err := Children("", os.Getpid())
	if err != nil || !slices.Contains(kids, pid) {
		t.Fatalf("Children(self) = %v, %v; want %d among them", kids, err, pid)
	}
	if l, err := ReadLineage("", pid); err != nil || !l.Zombie {
		t.Errorf("ReadLineage(zombie) = %+v, %v; want Zombie", l, err)
	}
	if kids, err := childrenByScan("/proc", os.Getpid()); err != nil || !slices.Contains(kids, pid) {
		t.Errorf("childrenByScan(self) = %v, %v; want %d among them", kids, err, pid)
	}
}
