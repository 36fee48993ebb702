package balancer

import (
	"context"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/onehost/onehost/internal/proctest"
)

// TestHAProxyDropsRoot: started by root with the product's rendering, HAProxy's worker (the
// process that parses what the internet sends) runs as haproxy:haproxy locked in
// /var/lib/haproxy, a reload's new worker too, and the runtime API's socket stays root's,
// mode 600. Before the template set user/group/chroot, the worker ran as root in /.
func TestHAProxyDropsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		proctest.Missing(t, "dropping root needs HAProxy started by root")
	}
	needHAProxy(t)
	params := HAProxyParams{Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))), Servers: []Server{{Addr: "127.0.0.1:1"}}, Threads: 1}
	var log syncBuffer
	h, err := StartHAProxy(context.Background(), readTemplate(t, "haproxy/haproxy.cfg"),
		HAProxyOptions{Dir: t.TempDir(), Params: params, Stderr: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if err := h.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("haproxy:\n%s", log.String())
		}
	})
	if uid, _ := procIDs(t, h.Pid(), "Uid:"); uid != "0" {
		t.Errorf("master uid %s, want 0 (it binds and re-executes itself on reload)", uid)
	}
	checkDropped(t, h)
	if err := h.Reload(context.Background(), params); err != nil {
		t.Fatalf("reload: %v", err)
	}
	checkDropped(t, h)
	fi, err := os.Stat(filepath.Join(h.Dir(), "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o600 || st.Uid != 0 {
		t.Errorf("stats socket: mode %v, uid %d; want 0600, root's", fi.Mode().Perm(), st.Uid)
	}
}

// checkDropped asserts that h's current worker runs as DefaultUser:DefaultGroup (real,
// effective, saved, filesystem ids) with its root at DefaultChroot.
func checkDropped(t *testing.T, h *HAProxy) {
	t.Helper()
	u, err := user.Lookup(DefaultUser)
	if err != nil {
		proctest.Missing(t, "no haproxy user (Debian's haproxy package creates it): "+err.Error())
	}
	g, err := user.LookupGroup(DefaultGroup)
	if err != nil {
		proctest.Missing(t, "no haproxy group: "+err.Error())
	}
	uid, gid := u.Uid, g.Gid
	pid, err := h.workerPid()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat(" "+uid, 4)
	if _, ids := procIDs(t, pid, "Uid:"); ids != want {
		t.Errorf("worker %d Uid:%s, want%s", pid, ids, want)
	}
	want = strings.Repeat(" "+gid, 4)
	if _, ids := procIDs(t, pid, "Gid:"); ids != want {
		t.Errorf("worker %d Gid:%s, want%s", pid, ids, want)
	}
	if root, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/root"); err != nil || root != DefaultChroot {
		t.Errorf("worker %d root %q (%v), want %s", pid, root, err, DefaultChroot)
	}
}

// procIDs returns the first id and all ids (" a b c d") of /proc/PID/status's line key.
func procIDs(t *testing.T, pid int, key string) (first, all string) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(v)
			return f[0], " " + strings.Join(f, " ")
		}
	}
	t.Fatalf("/proc/%d/status: no %s line", pid, key)
	return "", ""
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago (HAProxy cannot bind port 0
// and say which it got).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
