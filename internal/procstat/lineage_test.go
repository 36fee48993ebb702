package procstat

import (
	"os"
	"syscall"
	"testing"
)

func TestReadLineage(t *testing.T) {
	got, err := ReadLineage("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if want := (Lineage{PPID: os.Getppid(), PGID: syscall.Getpgrp()}); got != want {
		t.Errorf("ReadLineage(self) = %+v, want %+v", got, want)
	}
	if _, err := ReadLineage(t.TempDir(), 1); err == nil {
		t.Error("ReadLineage of a missing process: nil error")
	}
}
