package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/proctest"
	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/systemd"
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
	// Named after its only app (not ecosystem, which every PM2 project's file is called).
	for _, want := range []string{"sudo tee /etc/systemd/system/api.service", "sudo systemctl daemon-reload && sudo systemctl enable --now api", "RuntimeDirectory=api\n"} {
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

	// -env NAME: the apps as `run -env NAME` reads them, and the unit runs that.
	os.WriteFile(eco, []byte(`{"apps":[{"name":"api","script":"./server.js","instances":2,"env":{"PORT":3000},"env_production":{"NODE_ENV":"production"}}]}`), 0o644)
	out.Reset()
	if err := run(context.Background(), []string{"startup", "-config", "ecosystem.config.json", "-env", "production"}, os.Getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), " -env production -socket /run/api/supervisor.sock\n"); n != 2 {
		t.Errorf("-env production in %d of ExecStartPre and ExecStart, want both:\n%s", n, &out)
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

// TestStartupUnitFields: the unit for the README's `startup -config configs/cluster.yaml`
// (typed in the repository, with -env-file) has what it needs to run there: the env file,
// the working directory where the config's relative paths resolve, the shell's PATH, the
// app's and the database's directories writable, a name of its own and its runtime
// directory; it warns of what PrivateTmp hides, and verifies clean.
func TestStartupUnitFields(t *testing.T) {
	proj := t.TempDir() // under /tmp: the PrivateTmp warning is expected
	os.MkdirAll(filepath.Join(proj, "configs"), 0o755)
	cfgText, err := os.ReadFile("../../configs/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(proj, "configs", "cluster.yaml"), cfgText, 0o644)
	dbDir := t.TempDir() // the database elsewhere: a ReadWritePaths= of its own
	envFile := filepath.Join(proj, "onehost.env")
	os.WriteFile(envFile, []byte("SQLITE_PATH="+dbDir+"/feed.db\nJWT_SECRET_FILE=data/jwt_secret\n"), 0o600)
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	os.Chdir(proj)
	proj, _ = os.Getwd() // as the process sees it
	env := map[string]string{"PATH": "/usr/local/bin:/usr/bin:bin:/usr/bin:/bin"}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"startup", "-config", "configs/cluster.yaml", "-env-file", "onehost.env"},
		func(k string) string { return env[k] }, &out, &errOut); err != nil {
		t.Fatalf("startup: %v\n%s", err, &errOut)
	}
	unit := out.String()
	for _, want := range []string{
		"\nWorkingDirectory=" + proj + "\n",
		"\nEnvironmentFile=" + envFile + "\n",
		"\nEnvironment=\"PATH=/usr/local/bin:/usr/bin:/bin\"\n", // absolute entries, each once
		"\nReadWritePaths=" + proj + "\n",
		"\nReadWritePaths=" + dbDir + "\n",
		"\nRuntimeDirectory=cluster\n",
		"\nExecStartPre=",
		" run -check -config " + filepath.Join(proj, "configs", "cluster.yaml") + " -socket /run/cluster/supervisor.sock\n",
		" run -config " + filepath.Join(proj, "configs", "cluster.yaml") + " -socket /run/cluster/supervisor.sock\n",
		"sudo tee /etc/systemd/system/cluster.service",
		"-env-file " + envFile,
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("no %q in the unit:\n%s", want, unit)
		}
	}
	warnings := errOut.String()
	for _, want := range []string{
		`PATH entry "bin" is not absolute`,
		"is under /tmp, and the unit's PrivateTmp=yes",
		"the unit would not start: ", // the worker beside the test binary is not there
		"run -check -config " + proj, // how to check again
	} {
		if !strings.Contains(warnings, want) {
			t.Errorf("no %q in the warnings:\n%s", want, warnings)
		}
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		path := filepath.Join(t.TempDir(), "cluster.service")
		os.WriteFile(path, out.Bytes(), 0o644)
		if out, err := exec.Command(sa, "verify", path).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
		if exposure, sec := unitExposure(t, sa, path); exposure > 2.5 {
			t.Errorf("exposure %.1f, want at most 2.5:\n%s", exposure, sec)
		}
	}
	// -name, and the names a unit may not have.
	out.Reset()
	if err := run(context.Background(), []string{"startup", "-config", "configs/cluster.yaml", "-name", "shop"}, os.Getenv, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "RuntimeDirectory=shop\n") || !strings.Contains(out.String(), "-socket /run/shop/supervisor.sock\n") {
		t.Errorf("startup -name shop = %v:\n%s", err, &out)
	}
	if err := run(context.Background(), []string{"startup", "-config", "configs/cluster.yaml", "-name", "a/b"}, os.Getenv, io.Discard, io.Discard); err == nil {
		t.Error("startup -name a/b: no error")
	}
	if err := run(context.Background(), []string{"startup", "-config", "configs/cluster.yaml", "-env", "production"}, os.Getenv, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "applies to a PM2 ecosystem file") {
		t.Errorf("startup -env of our YAML = %v, want a refusal", err)
	}
}

// TestStartupREADMEUnitRuns: the README's `startup -config configs/cluster.yaml -env-file
// FILE`, typed in a copy of the repository with make run's data, prints a unit whose
// commands, run as systemd runs them (from WorkingDirectory, with its PATH and its
// EnvironmentFile's variables and nothing else of this shell), check clean and serve; the
// same check without the env file fails naming what the worker lacks. (Not under systemd:
// no container tree here for bench/systemd-nspawn.sh; the sandbox is not applied.)
func TestStartupREADMEUnitRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs the real worker")
	}
	t.Parallel() // no chdir, no package variable: the commands run as processes
	bins := buildBinaries(t)
	proj := t.TempDir()
	os.MkdirAll(filepath.Join(proj, "configs"), 0o755)
	os.MkdirAll(filepath.Join(proj, "data"), 0o700)
	cfgText, err := os.ReadFile("../../configs/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgText = regexp.MustCompile(`(?m)^instances: .*$`).ReplaceAll(cfgText, []byte("instances: 2"))
	cfgText = regexp.MustCompile(`(?m)^listen: .*$`).ReplaceAll(cfgText, []byte("listen: 127.0.0.1:0"))
	os.WriteFile(filepath.Join(proj, "configs", "cluster.yaml"), cfgText, 0o644)
	if err := os.Rename(seedtest.Path(t), filepath.Join(proj, "data", "feed.db")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(proj, "data", "jwt_secret"), []byte(strings.Repeat("k", 32)+"\n"), 0o600)
	// make run's variables, relative to the repository as make gives them.
	os.WriteFile(filepath.Join(proj, "data", "onehost.env"), []byte("SQLITE_PATH=data/feed.db\nJWT_SECRET_FILE=data/jwt_secret\n"), 0o600)
	shell := func(env []string, args ...string) (string, error) { // the user's shell, in proj
		cmd := exec.Command(bins.supervisor, args...)
		cmd.Dir, cmd.Env = proj, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	shellEnv := []string{"PATH=" + os.Getenv("PATH")}
	if out, err := shell(shellEnv, "run", "-check", "-config", "configs/cluster.yaml"); err == nil ||
		!strings.Contains(out, "SQLITE_PATH is not set") || !strings.Contains(out, "neither JWT_SECRET nor JWT_SECRET_FILE") {
		t.Errorf("run -check without the env = %v, want SQLITE_PATH and JWT_SECRET named:\n%s", err, out)
	}
	if out, err := shell(shellEnv, "run", "-check", "-config", "configs/cluster.yaml", "-env-file", "data/onehost.env"); err != nil {
		t.Errorf("run -check -env-file = %v:\n%s", err, out)
	}
	cmd := exec.Command(bins.supervisor, "startup", "-config", "configs/cluster.yaml", "-env-file", "data/onehost.env")
	cmd.Dir, cmd.Env = proj, shellEnv
	var unitOut, warnings bytes.Buffer
	cmd.Stdout, cmd.Stderr = &unitOut, &warnings
	if err := cmd.Run(); err != nil {
		t.Fatalf("startup: %v\n%s", err, &warnings)
	}
	unit := unitOut.String()
	if strings.Contains(warnings.String(), "would not start") {
		t.Errorf("startup warns the unit would not start:\n%s", &warnings)
	}
	field := func(key string) string {
		m := regexp.MustCompile(`(?m)^` + key + `=(.*)$`).FindStringSubmatch(unit)
		if m == nil {
			t.Fatalf("no %s= in:\n%s", key, unit)
		}
		return m[1]
	}
	// systemd's environment for the service: its Environment= and EnvironmentFile= only.
	env := []string{strings.Trim(field("Environment"), `"`)}
	fileEnv, err := systemd.ReadEnvFile(field("EnvironmentFile"))
	if err != nil {
		t.Fatal(err)
	}
	env = append(env, fileEnv...)
	wd := field("WorkingDirectory")
	sock := filepath.Join(t.TempDir(), "supervisor.sock") // for /run/cluster/supervisor.sock
	exec1 := func(line string) *exec.Cmd {
		args := strings.Fields(strings.ReplaceAll(line, "/run/cluster/supervisor.sock", sock))
		c := exec.Command(args[0], args[1:]...)
		c.Dir, c.Env = wd, env
		return c
	}
	if out, err := exec1(field("ExecStartPre")).CombinedOutput(); err != nil {
		t.Fatalf("ExecStartPre: %v\n%s", err, out)
	}
	start := exec1(field("ExecStart"))
	logs := &syncBuffer{}
	start.Stdout, start.Stderr = logs, logs
	if err := start.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- start.Wait() }()
	defer func() {
		exec.Command(bins.supervisor, "kill", "-socket", sock).Run()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			start.Process.Kill()
			<-exited
			t.Error("the supervisor did not stop")
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs)
		}
	}()
	var st control.Status
	for deadline := time.Now().Add(60 * time.Second); ; {
		out, err := exec.Command(bins.supervisor, "status", "-json", "-socket", sock).Output()
		if err == nil && json.Unmarshal(out, &st) == nil && len(st.Workers) == 2 && everyOnline(st) {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the unit's supervisor exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not online: %s %v", out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get("http://" + st.Addr + "/posts/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /posts/1 = %d, want 200", resp.StatusCode)
	}
}

// TestStartupRefusesInjection: nothing printed into the unit can end its line: a carriage
// return (systemd ends a line there as at a newline) in a configuration's cwd, in an
// env's path, in out_file or in a PATH entry, and a newline in -user, are refused with
// the value named, and no unit is printed. (A CR in cwd once passed and gave the unit
// lines of the configuration's choosing: User=root, ExecStartPre=+....)
func TestStartupRefusesInjection(t *testing.T) {
	t.Parallel()
	const evil = "\rUser=root\rExecStartPre=+/bin/sh -c id"
	cases := []struct {
		name   string
		file   string // default app.yaml, whose command is given
		config string
		args   []string
		path   string
		want   string
	}{
		{name: "CR in cwd", config: "cwd: \"/srv/app" + yamlEsc(evil) + "\"\n", want: "is a control character"},
		{name: "CR in an env path", config: "env: {SQLITE_PATH: \"/srv/db" + yamlEsc(evil) + "/feed.db\"}\n", want: "is a control character"},
		{name: "CR in out_file", file: "ecosystem.json", want: "is a control character",
			config: `{"apps":[{"name":"app","script":"/bin/sleep","args":"60","merge_logs":true,"out_file":"/srv/log` + yamlEsc(evil) + `/out.log"}]}`},
		{name: "CR in a PATH entry", path: "/usr/bin:/opt" + evil + ":/bin", want: "PATH entry"},
		{name: "newline in -user", args: []string{"-user", "app\nUser=root"}, want: "-user"},
		{name: "-user with a space", args: []string{"-user", "app x"}, want: "-user"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, cmp.Or(c.file, "app.yaml"))
			text := c.config
			if c.file == "" {
				text = "command: [/bin/sleep, \"60\"]\n" + text
			}
			os.WriteFile(cfg, []byte(text), 0o600)
			path := cmp.Or(c.path, "/usr/bin:/bin")
			var out, errOut bytes.Buffer
			args := append([]string{"startup", "-config", cfg, "-dir", dir, "-name", "app"}, c.args...)
			err := run(context.Background(), args, func(k string) string {
				if k == "PATH" {
					return path
				}
				return ""
			}, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("startup: %v, want a refusal with %q\nunit:\n%s", err, c.want, &out)
			}
			if out.Len() > 0 {
				t.Errorf("a unit was printed:\n%s", &out)
			}
		})
	}
}

// yamlEsc writes s's control characters as a YAML double-quoted string's escapes.
func yamlEsc(s string) string { return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s) }
