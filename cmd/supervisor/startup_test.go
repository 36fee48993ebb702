package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/proctest"
)

// TestStartup: `supervisor startup` prints a unit for the given configuration that
// verifies clean and is as hardened as configs/onehost.service (exposure at most 2.5 by
// `systemd-analyze security`, judged as TestSystemdUnit judges that file), and the
// commands that install and start it.
func TestStartup(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		proctest.Missing(t, "systemd-analyze not installed (Debian: apt-get install systemd; .ci/run does)")
	}
	dir := t.TempDir()
	eco := filepath.Join(dir, "ecosystem.config.json")
	os.WriteFile(eco, []byte(`{"apps":[{"name":"api","script":"./server.js","instances":"max","exec_mode":"cluster","env":{"PORT":3000}}]}`), 0o644)
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	os.Chdir(dir) // -config relative to here, made absolute in the unit
	var out bytes.Buffer
	if err := run(context.Background(), []string{"startup", "-config", "ecosystem.config.json"}, os.Getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	unit := out.Bytes()
	realEco, _ := filepath.EvalSymlinks(eco)
	if !bytes.Contains(unit, []byte(" run -config "+eco+" ")) && !bytes.Contains(unit, []byte(" run -config "+realEco+" ")) {
		t.Errorf("unit does not run the absolute -config %s:\n%s", eco, unit)
	}
	for _, want := range []string{"sudo tee /etc/systemd/system/ecosystem.service", "sudo systemctl daemon-reload && sudo systemctl enable --now ecosystem"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("no %q in:\n%s", want, unit)
		}
	}
	path := filepath.Join(t.TempDir(), "ecosystem.service")
	os.WriteFile(path, unit, 0o644)
	exposure, sec := unitExposure(t, sa, path)
	t.Logf("systemd-analyze security: exposure %.1f", exposure)
	if exposure > 2.5 {
		t.Errorf("exposure %.1f, want at most 2.5:\n%s", exposure, sec)
	}
	if out, err := exec.Command(sa, "verify", path).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Its ExecStart is a command line the supervisor accepts (flags parse).
	ex := regexp.MustCompile(`(?m)^ExecStart=\S+ (.*)$`).FindSubmatch(unit)
	if ex == nil || !strings.HasPrefix(string(ex[1]), "run -config /") {
		t.Fatalf("ExecStart %q", ex)
	}

	if err := run(context.Background(), []string{"startup", "-config", filepath.Join(dir, "absent.json")}, os.Getenv, io.Discard, io.Discard); err == nil {
		t.Error("startup with an absent config: no error")
	}
}

// TestHelpExitsZero: `supervisor -h`, `help` and `CMD -h` print their usage and succeed,
// as pm2's do.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"run", "-h"}, {"status", "-h"}, {"logs", "--help"}, {"scale", "-h"}, {"monit", "-h"}, {"startup", "-h"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); err != nil {
			t.Errorf("run %q = %v, want nil", args, err)
		}
		if out.Len()+errOut.Len() == 0 {
			t.Errorf("run %q printed no usage", args)
		}
	}
}
