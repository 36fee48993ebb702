package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/systemd"
)

// fakeStore is a datagram socket standing in for systemd's NOTIFY_SOCKET that keeps what
// FDSTORE=1 / FDSTOREREMOVE=1 say, as systemd's file descriptor store does.
type fakeStore struct {
	mu    sync.Mutex
	files map[string]*os.File
}

func startFakeStore(t *testing.T, path string) *fakeStore {
	t.Helper()
	ns, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeStore{files: map[string]*os.File{}}
	t.Cleanup(func() { ns.Close() })
	go func() {
		b, oob := make([]byte, 4096), make([]byte, 1024)
		for {
			n, oobn, _, _, err := ns.ReadMsgUnix(b, oob)
			if err != nil {
				return
			}
			var fds []int
			if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if f, err := syscall.ParseUnixRights(&m); err == nil {
						fds = append(fds, f...)
					}
				}
			}
			vars := map[string]string{}
			for _, l := range strings.Split(string(b[:n]), "\n") {
				k, v, _ := strings.Cut(l, "=")
				vars[k] = v
			}
			fs.mu.Lock()
			switch {
			case vars["FDSTOREREMOVE"] == "1":
				if f := fs.files[vars["FDNAME"]]; f != nil {
					f.Close()
					delete(fs.files, vars["FDNAME"])
				}
			case vars["FDSTORE"] == "1" && len(fds) == 1:
				fs.files[vars["FDNAME"]] = os.NewFile(uintptr(fds[0]), vars["FDNAME"])
				fds = nil
			}
			fs.mu.Unlock()
			for _, fd := range fds {
				syscall.Close(fd)
			}
		}
	}()
	return fs
}

func (fs *fakeStore) names() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []string
	for n := range fs.files {
		out = append(out, n)
	}
	return out
}

// TestSystemdFDStore: under systemd the slots' sockets go to the file descriptor store;
// after the supervisor stops, a connection made while none runs waits in their queue, and
// the next supervisor, given them back as LISTEN_FDS, serves the very sockets (same
// address, same inodes) and answers it: a restart refuses nothing.
func TestSystemdFDStore(t *testing.T) {
	dir := t.TempDir()
	store := startFakeStore(t, filepath.Join(dir, "notify"))
	cfg := filepath.Join(dir, "cluster.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 2\nwait_ready: true\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv)), 0o600)
	a := &runningCluster{socket: filepath.Join(dir, "a.sock")}
	env := map[string]string{"NOTIFY_SOCKET": filepath.Join(dir, "notify")}
	done := make(chan error, 1)
	logs := &syncBuffer{}
	go func() {
		done <- run(context.Background(), []string{"run", "-config", cfg, "-socket", a.socket, "-listen", "127.0.0.1:0", "--", os.Args[0]},
			func(k string) string { return env[k] }, io.Discard, logs)
	}()
	var st control.Status
	defer func() {
		if t.Failed() {
			t.Logf("first supervisor:\n%s\nstored %v", logs, store.names())
		}
	}()
	waitUntil(t, 20*time.Second, "first supervisor online, both sockets stored", func() bool {
		var err error
		st, err = a.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st) && len(store.names()) == 2
	})
	t.Logf("stored %v", store.names())
	addr := st.Addr
	a.cmd("stop")
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// No supervisor now: the store holds the sockets, so a client's connection waits.
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("connect while no supervisor runs: %v (want it queued in the kept socket)", err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

	store.mu.Lock()
	s0, s1 := store.files["slot-0"], store.files["slot-1"]
	store.mu.Unlock()
	if s0 == nil || s1 == nil {
		t.Fatalf("stored %v, want slot-0 and slot-1", store.names())
	}
	var in0, in1 syscall.Stat_t
	syscall.Fstat(int(s0.Fd()), &in0)
	syscall.Fstat(int(s1.Fd()), &in1)
	// The next supervisor, as systemd starts it: the sockets from fd 3, LISTEN_PID its pid
	// (through the supervisor's own shim).
	b := &runningCluster{socket: filepath.Join(dir, "b.sock")}
	cmd := exec.Command(os.Args[0], systemd.ListenPIDShim, "--", os.Args[0], "run", "-config", cfg, "-socket", b.socket, "-listen", "127.0.0.1:0", "--", os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "LISTEN_FDS=2", "LISTEN_FDNAMES=slot-0:slot-1", "GORACE=atexit_sleep_ms=0")
	cmd.ExtraFiles = []*os.File{s0, s1}
	blog := &syncBuffer{}
	cmd.Stderr = blog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("second supervisor:\n%s", blog)
		}
	})
	waitUntil(t, 20*time.Second, "second supervisor online", func() bool {
		var err error
		st, err = b.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st)
	})
	if st.Addr != addr {
		t.Errorf("second supervisor serves %s, want the kept %s", st.Addr, addr)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Errorf("the request made while no supervisor ran: %q %v, want 200 from the next one", line, err)
	}
	want := map[uint64]bool{in0.Ino: true, in1.Ino: true}
	for _, w := range st.Workers {
		ls, _ := procstat.Listeners("", w.PID)
		if len(ls) != 1 || !want[ls[0].Inode] {
			t.Errorf("worker %d listens on %+v, want one of the kept sockets %v", w.PID, ls, want)
		}
	}
}
