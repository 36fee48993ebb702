// Package goldentest compares test output with golden files under a package's testdata/,
// and rewrites them when the test binary runs with -update.
package goldentest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Check compares got with testdata/name. With -update it first writes got there.
// A difference is reported at its first differing byte, with 60 bytes of context.
func Check(tb testing.TB, name string, got []byte) {
	tb.Helper()
	CheckPath(tb, filepath.Join("testdata", name), got)
}

// CheckPath is Check for a file outside testdata/: one the package embeds or serves, made
// by the test's code and committed, such as a page compressed ahead.
func CheckPath(tb testing.TB, path string, got []byte) {
	tb.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		tb.Errorf("output differs from %s at byte %d (run go test -update if the change is intended): got %q, want %q",
			path, i, got[i:min(i+60, len(got))], want[i:min(i+60, len(want))])
	}
}
