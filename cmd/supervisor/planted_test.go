package main

// What another user could plant where the supervisor looks, or hold that it needs (issue
// 46): a dump resurrect would start, the temporary file of save, a parent directory of
// -socket or -log-dir another user could swap, a TCP port bound first, idle connections.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
)

// plantedDump writes a dump that would run `touch marker` as whoever resurrects it.
func plantedDump(t *testing.T, path, socket, marker string) {
	t.Helper()
	d := control.Dump{Version: 1, SavedAt: time.Now(), Socket: socket, Cwd: "/",
		Args: []string{"-socket", socket, "-listen", "127.0.0.1:0", "--", "/bin/sh", "-c", "touch " + marker + "; exec sleep 60"},
		Env:  []string{"PATH=/usr/bin:/bin"}, Apps: []control.DumpApp{{Mode: "cluster", Status: "running", Instances: 1}}}
	b, _ := json.Marshal(d)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestResurrectRefusesPlantedDump: resurrect believes a dump only when this user wrote it
// where no other user can change it; else it says why and starts nothing. (It once started
// a dump another user planted in /tmp/onehost-UID, as the victim.)
func TestResurrectRefusesPlantedDump(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		root bool
		// plant makes the runtime directory dir (absent) and the dump at path in it.
		plant func(t *testing.T, dir, path, socket, marker string)
		want  string
	}{
		{name: "dump of another user", root: true, want: "belongs to uid 65534", plant: func(t *testing.T, dir, path, socket, marker string) {
			os.Mkdir(dir, 0o700)
			plantedDump(t, path, socket, marker)
			chownNobody(t, path)
		}},
		{name: "directory of another user", root: true, want: "belongs to uid 65534", plant: func(t *testing.T, dir, path, socket, marker string) {
			os.Mkdir(dir, 0o700)
			plantedDump(t, path, socket, marker)
			chownNobody(t, dir)
		}},
		{name: "dump readable by others", want: "lets others read or change it", plant: func(t *testing.T, dir, path, socket, marker string) {
			os.Mkdir(dir, 0o700)
			plantedDump(t, path, socket, marker)
			os.Chmod(path, 0o644)
		}},
		{name: "dump is a link", want: "is a symbolic link", plant: func(t *testing.T, dir, path, socket, marker string) {
			os.Mkdir(dir, 0o700)
			plantedDump(t, path+".real", socket, marker)
			os.Symlink(path+".real", path)
		}},
		{name: "a parent others can write", want: "is writable by others", plant: func(t *testing.T, dir, path, socket, marker string) {
			os.Chmod(filepath.Dir(dir), 0o777)
			os.Mkdir(dir, 0o700)
			plantedDump(t, path, socket, marker)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("gives a file to uid 65534: needs root (CI runs as root)")
			}
			base := t.TempDir()
			dir := filepath.Join(base, "onehost")
			socket := filepath.Join(dir, "supervisor.sock")
			marker := filepath.Join(t.TempDir(), "ran")
			c.plant(t, dir, strings.TrimSuffix(socket, ".sock")+".dump.json", socket, marker) // where save writes it
			var out bytes.Buffer
			err := run(context.Background(), []string{"resurrect", "-socket", socket}, func(string) string { return "" }, &out, &out)
			if err == nil || !strings.Contains(err.Error(), "resurrect: refused") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("resurrect: %v, want a refusal with %q\n%s", err, c.want, out.String())
			}
			time.Sleep(300 * time.Millisecond) // what a start would have run by now
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the planted dump's command ran")
			}
			if _, err := os.Stat(socket); err == nil {
				t.Fatal("a supervisor was started from the planted dump")
			}
		})
	}
}

// TestSaveIgnoresPlantedTemp: save into a directory shared with others (sticky, as /tmp)
// writes the dump, environment and all, to a new file of its own and renames it: a link
// planted at PATH.tmp (where save once wrote first, following it) gets nothing.
func TestSaveIgnoresPlantedTemp(t *testing.T) {
	t.Parallel()
	c := startRun(t, "instances: 1\nenv: {"+roleEnv+": worker, ONEHOST_TEST_SECRET: hunter2}\n", "--", os.Args[0])
	shared := filepath.Join(t.TempDir(), "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777|os.ModeSticky)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o666)
	path := filepath.Join(shared, "dump.json")
	if err := os.Symlink(victim, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cmd("save", "-file", path); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("the planted link's target now holds %d bytes: save wrote the dump through it", len(b))
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dump %s: %v, %v; want a regular file of mode 0600", path, fi, err)
	}
	// And it reads back: the saved dump passes resurrect's checks.
	var d control.Dump
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &d) != nil || d.Version != 1 {
		t.Fatalf("dump: %v", err)
	}
}

// TestRunRefusesSwappableParents: a -socket or -log-dir whose parent another user can write
// is refused at start, naming that parent and the fix, before any worker starts: there they
// could rename the checked directory away and put theirs in its place (the Node preload,
// the logs, the notify sockets and the dump are opened there by path later).
func TestRunRefusesSwappableParents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args func(open, mine string) []string
	}{
		{"socket", func(open, mine string) []string { return []string{"-socket", filepath.Join(mine, "s.sock")} }},
		{"log-dir", func(open, mine string) []string {
			return []string{"-socket", filepath.Join(filepath.Dir(open), "s.sock"), "-log-dir", mine}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			open := filepath.Join(base, "open")
			os.Mkdir(open, 0o777)
			os.Chmod(open, 0o777)
			mine := filepath.Join(open, "mine")
			os.Mkdir(mine, 0o700)
			marker := filepath.Join(base, "ran")
			args := append([]string{"run", "-listen", "127.0.0.1:0"}, c.args(open, mine)...)
			args = append(args, "--", "/bin/sh", "-c", "touch "+marker+"; exec sleep 60")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := run(ctx, args, func(string) string { return "" }, &out, &out)
			if err == nil || !strings.Contains(err.Error(), "directory "+open+" is writable by others") || !strings.Contains(err.Error(), "chmod go-w "+open) {
				t.Fatalf("run: %v, want a refusal naming %s and the fix\n%s", err, open, out.String())
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("a worker started")
			}
		})
	}
}

func chownNobody(t *testing.T, p string) {
	t.Helper()
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
}

// TestTCPPortsSquatted: a program that holds the -agent, -metrics or -dashboard port
// before the supervisor starts is refused before any app starts, naming the port (a
// squatter on the agent's port once made run exit after the apps started, and HAProxy
// believed its answers, `up ready 1000000%` included).
func TestTCPPortsSquatted(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"-agent", "-metrics", "-dashboard"} {
		t.Run(flag, func(t *testing.T) {
			squat, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer squat.Close()
			dir := t.TempDir()
			marker := filepath.Join(dir, "ran")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out bytes.Buffer
			err = run(ctx, []string{"run", "-listen", "127.0.0.1:0", "-socket", filepath.Join(dir, "s.sock"), flag, squat.Addr().String(),
				"--", "/bin/sh", "-c", "touch " + marker + "; exec sleep 60"}, func(string) string { return "" }, &out, &out)
			if err == nil || !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("run with %s on a held port: %v, want a refusal\n%s", flag, err, &out)
			}
			time.Sleep(200 * time.Millisecond)
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("an app started before the refusal")
			}
		})
	}
}

// TestMetricsClosesIdleConnections: the -metrics page closes a connection that sends
// nothing (it once kept 227 of them under a 256-descriptor limit, and the supervisor could
// not start a worker: pipe2: too many open files).
func TestMetricsClosesIdleConnections(t *testing.T) {
	t.Parallel()
	c := startRun(t, "instances: 1\nenv: {"+roleEnv+": worker}\n", "-metrics", "127.0.0.1:0", "--", os.Args[0])
	var addr string
	waitUntil(t, 10*time.Second, "the metrics address in the log", func() bool {
		m := regexp.MustCompile(`"url": ?"http://([^"/]+)/metrics"`).FindStringSubmatch(c.logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	start := time.Now()
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("an idle connection to -metrics still open after 60 s")
	}
	t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
}
