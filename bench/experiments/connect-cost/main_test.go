package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary be the server child too, as the command's binary is.
func TestMain(m *testing.M) {
	if os.Getenv(holdEnv) != "" {
		if err := hold(os.NewFile(3, "holder")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if os.Getenv(serveEnv) != "" {
		if err := serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"spread and one address", []string{"-n", "300", "-one", "200", "-per-addr", "100", "-runs", "2", "-window", "100", "-client-cpu", "-1", "-server-cpu", "-1"},
			[]string{
				"run 1/2, spread: 300 connections over 3 source addresses (127.0.0.2–127.0.0.4), ≤ 100 per pair\n",
				"run 2/2, one address: 200 connections from one source address (the kernel's choice)\n",
				"medians of 2 runs (µs per connect over the last 100 dials before each mark):\n",
			}},
		{"marks", []string{"-n", "2500", "-one", "0", "-runs", "1", "-client-cpu", "-1", "-server-cpu", "-1"},
			[]string{"     1,000 ", "     2,000 ", "     2,500 ", "cost at 2,500 / cost at 1,000: CPU "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := run(context.Background(), tc.args, os.Getenv, &out, &errOut); err != nil {
				t.Fatalf("run: %v\n%s", err, errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"window too wide", []string{"-window", "2000"}, "want 1 to 1,000"},
		{"no runs", []string{"-runs", "0"}, "usage"},
		{"stray argument", []string{"x"}, "usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, os.Getenv, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}
