package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/ipc"
)

// TestRuntimeDirRefusesPlanted: a runtime directory someone else could have made (in /tmp
// anyone can, before us) is refused before anything is created in it, with the path and
// the fix; so is a planted lock symlink, whose target keeps its content. The supervisor
// once accepted a 0777 directory and truncated the lock symlink's target.
func TestRuntimeDirRefusesPlanted(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		plant   func(t *testing.T, dir string) // dir: the runtime directory, absent
		explict bool                           // -socket given, rather than the default path
		want    string
		root    bool
	}{
		{name: "mode 0777", want: "has mode 0777", plant: func(t *testing.T, dir string) {
			os.Mkdir(dir, 0o777)
			os.Chmod(dir, 0o777)
		}},
		{name: "mode 0750", want: "has mode 0750", plant: func(t *testing.T, dir string) { os.Mkdir(dir, 0o750) }},
		{name: "explicit -socket, writable by others", explict: true, want: "has mode 0777", plant: func(t *testing.T, dir string) {
			os.Mkdir(dir, 0o777)
			os.Chmod(dir, 0o777)
		}},
		{name: "symlink to a directory", want: "is a symbolic link", plant: func(t *testing.T, dir string) {
			other := t.TempDir()
			os.Symlink(other, dir)
		}},
		{name: "a file", want: "is not a directory", plant: func(t *testing.T, dir string) { os.WriteFile(dir, nil, 0o600) }},
		{name: "another user's", want: "belongs to uid 65534", root: true, plant: func(t *testing.T, dir string) {
			os.Mkdir(dir, 0o700)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "lock symlink to a victim's file", want: "is a symbolic link: remove it", plant: func(t *testing.T, dir string) {
			os.Mkdir(dir, 0o700)
			os.Symlink(filepath.Join(filepath.Dir(dir), "victim"), filepath.Join(dir, "supervisor.sock.lock"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("gives a directory to uid 65534: needs root (CI runs as root)")
			}
			xdg := t.TempDir()
			victim := filepath.Join(xdg, "victim")
			os.WriteFile(victim, []byte("precious\n"), 0o600)
			dir := filepath.Join(xdg, "onehost")
			c.plant(t, dir)
			args := []string{"run", "-listen", "127.0.0.1:0"}
			if c.explict {
				args = append(args, "-socket", filepath.Join(dir, "supervisor.sock"))
			}
			args = append(args, "--", "/bin/sleep", "60") // never started when refused
			getenv := func(k string) string {
				if k == "XDG_RUNTIME_DIR" {
					return xdg
				}
				return ""
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stderr syncBuffer
			err := run(ctx, args, getenv, io.Discard, &stderr)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("run = %v, want a refusal naming %s and saying %q\n%s", err, dir, c.want, &stderr)
			}
			if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
				t.Errorf("the victim's file now holds %q", b)
			}
			if _, err := os.Lstat(filepath.Join(dir, "supervisor.sock")); err == nil {
				t.Error("a control socket was made in the refused directory")
			}
		})
	}
}

// TestDefaultSocket: the runtime directory by environment and user.
func TestDefaultSocket(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if got := control.DefaultSocket(env(map[string]string{"XDG_RUNTIME_DIR": "/run/user/7"})); got != "/run/user/7/onehost/supervisor.sock" {
		t.Errorf("with XDG_RUNTIME_DIR: %s", got)
	}
	want := filepath.Join(os.TempDir(), fmt.Sprintf("onehost-%d", os.Geteuid()), "supervisor.sock")
	if os.Geteuid() == 0 {
		want = "/run/onehost/supervisor.sock"
	}
	if got := control.DefaultSocket(env(nil)); got != want {
		t.Errorf("without XDG_RUNTIME_DIR: %s, want %s", got, want)
	}
}

// nobodyListener runs a copy of the test binary as uid 65534 that listens on a unix socket
// at path and answers every connection with an HTTP 200 "stopped", reporting on its
// stdout what it read (bytes, descriptors): another user's program where the supervisor
// should be. Skips unless root.
func nobodyListener(t *testing.T, path string) *syncBuffer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runs a listener as uid 65534: needs root (CI runs as root)")
	}
	// A copy of the test binary where nobody may run it, and a directory nobody may bind in.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755)
	}
	bin := filepath.Join(dir, "helper")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(path), 0o777)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), roleEnv+"=nobody-listener", "NOBODY_LISTEN="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener as nobody did not start: %s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return out
}

// nobodyListen is the helper process of nobodyListener.
func nobodyListen() {
	path := os.Getenv("NOBODY_LISTEN")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	os.Chmod(path, 0o777)
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			os.Exit(2)
		}
		go func() {
			defer uc.Close()
			io.WriteString(uc, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"workers\":[]}")
			uc.SetReadDeadline(time.Now().Add(2 * time.Second))
			b, oob := make([]byte, 4096), make([]byte, 256)
			for {
				n, oobn, _, _, err := uc.ReadMsgUnix(b, oob)
				if n > 0 || oobn > 0 {
					fmt.Printf("read %d bytes, %d of control data\n", n, oobn)
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// TestClientRefusesOtherUser: another user's listener at the control socket's path (as
// when it could replace it in a shared /tmp directory) gets no request from the CLI, which
// says who is there instead of printing what it answered: `supervisor stop` once printed
// "stopped" while the real supervisor ran on.
func TestClientRefusesOtherUser(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "supervisor.sock")
	heard := nobodyListener(t, sock)
	for _, cmd := range []string{"stop", "status"} {
		var out bytes.Buffer
		err := run(context.Background(), []string{cmd, "-socket", sock}, func(string) string { return "" }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") || strings.Contains(out.String(), "stopped") {
			t.Errorf("%s against another user's listener = %v (%q), want a refusal naming uid 65534", cmd, err, out.String())
		}
		// Root is told how to ask that user's supervisor instead.
		if os.Geteuid() == 0 && (err == nil || !strings.Contains(err.Error(), "run the command as that user: sudo -u ")) {
			t.Errorf("%s as root against another user's socket = %v, want the sudo -u hint", cmd, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(heard.String(), "read ") {
		t.Errorf("the other user's listener was sent something: %s", heard)
	}
}

// TestRejoinRefusesOtherUser: a worker that lost its supervisor finds another user's
// listener at the rendezvous path: it sends it nothing (not its hello, not its listening
// socket) and keeps dialling until its wait ends.
func TestRejoinRefusesOtherUser(t *testing.T) {
	t.Parallel()
	rv := filepath.Join(t.TempDir(), "supervisor.sock.adopt")
	heard := nobodyListener(t, rv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lf, _ := ln.(*net.TCPListener).File()
	defer lf.Close()
	_, _, err = ipc.Rejoin(context.Background(), rv, ipc.Hello{PID: os.Getpid()}, lf, 300*time.Millisecond)
	if !errors.Is(err, ipc.ErrNoSupervisor) || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("Rejoin = %v, want no supervisor found, the listener of uid 65534 refused", err)
	}
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(heard.String(), "read ") {
		t.Errorf("the other user's listener was sent something: %s", heard)
	}
}
