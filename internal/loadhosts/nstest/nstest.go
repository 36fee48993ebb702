// Package nstest makes load "hosts" for tests of the ssh path (internal/loadhosts,
// `ceiling challenge -load-hosts`, `ceiling sweep -load-hosts`): network namespaces
// joined to this one by veth pairs, each with Debian's sshd listening on its address and
// a key made for the test. The hosts share this machine's processes and files, not its
// network. Where namespaces or sshd cannot be had it skips the test with the reason
// (fails it where CI requires the programs: package proctest).
package nstest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/proctest"
)

// Hosts are the made hosts.
type Hosts struct {
	// Specs are "root@addr:port", as -load-hosts and loadhosts.ParseHosts take them.
	Specs []string
	// Options are the ssh -o options that reach them (the test's key and known hosts).
	Options []string
	// Local[i] is this side's address of host i's veth. Every host routes to all of
	// them (its default route is its veth), so a server on Local[0] is reachable from
	// every host.
	Local []string
	Dir   string // the keys, the sshd configurations
}

// Check skips tb (fails it in CI) unless this process can make the hosts.
func Check(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		proctest.Missing(tb, "network namespaces need root")
	}
	for _, p := range []string{"ip", "nsenter", "ssh", "scp", "ssh-keygen", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(p); err != nil {
			proctest.Missing(tb, p+" not installed (Debian: openssh-server, iproute2; .ci/run installs them)")
		}
	}
}

// New makes n hosts, removed (namespaces, links, sshd) when the test ends.
func New(t *testing.T, n int) Hosts {
	t.Helper()
	Check(t)
	dir := t.TempDir()
	sh(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "id"))
	pub, _ := os.ReadFile(filepath.Join(dir, "id.pub"))
	os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600)
	hs := Hosts{Dir: dir, Options: []string{
		"IdentityFile=" + filepath.Join(dir, "id"), "IdentitiesOnly=yes",
		"UserKnownHostsFile=" + filepath.Join(dir, "known_hosts"), "StrictHostKeyChecking=yes",
		"ConnectTimeout=10",
	}}
	subnet := 1 + rand.IntN(250) // unique names and addresses per run
	for i := range n {
		spec, local := host(t, dir, subnet, i)
		hs.Specs = append(hs.Specs, spec)
		hs.Local = append(hs.Local, local)
	}
	return hs
}

func sh(t *testing.T, argv ...string) {
	t.Helper()
	if b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, b)
	}
}

// host makes host i: a namespace, a veth pair with a /30 on it, sshd inside.
func host(t *testing.T, dir string, subnet, i int) (spec, local string) {
	t.Helper()
	tag := fmt.Sprintf("lh%d%d", subnet, i)
	ns, outer, inner := tag+"ns", tag+"a", tag+"b"
	local, remote := fmt.Sprintf("10.231.%d.%d", subnet, 4*i+1), fmt.Sprintf("10.231.%d.%d", subnet, 4*i+2)
	sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	sh(t, "ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
	t.Cleanup(func() { exec.Command("ip", "link", "del", outer).Run() })
	sh(t, "ip", "link", "set", inner, "netns", ns)
	sh(t, "ip", "addr", "add", local+"/30", "dev", outer)
	sh(t, "ip", "link", "set", outer, "up")
	sh(t, "ip", "-n", ns, "addr", "add", remote+"/30", "dev", inner)
	sh(t, "ip", "-n", ns, "link", "set", inner, "up")
	sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	sh(t, "ip", "-n", ns, "route", "add", "default", "via", local)

	hd := filepath.Join(dir, tag)
	os.MkdirAll(hd, 0o700)
	sh(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(hd, "hostkey"))
	os.MkdirAll("/run/sshd", 0o755) // sshd's privilege-separation directory
	port := 20000 + rand.IntN(20000)
	cfg := fmt.Sprintf("Port %d\nListenAddress %s\nHostKey %s\nAuthorizedKeysFile %s\nPidFile %s\nUsePAM no\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin yes\nSubsystem sftp internal-sftp\n",
		port, remote, filepath.Join(hd, "hostkey"), filepath.Join(dir, "authorized_keys"), filepath.Join(hd, "sshd.pid"))
	os.WriteFile(filepath.Join(hd, "sshd_config"), []byte(cfg), 0o600)
	sshd := exec.Command("nsenter", "--net=/run/netns/"+ns, "/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(hd, "sshd_config"))
	sshd.Stderr = &prefixWriter{t: t, p: tag + " sshd: "}
	if err := sshd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sshd.Process.Kill(); sshd.Wait() })

	pub, _ := os.ReadFile(filepath.Join(hd, "hostkey.pub"))
	f, _ := os.OpenFile(filepath.Join(dir, "known_hosts"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	fmt.Fprintf(f, "[%s]:%d %s", remote, port, pub)
	f.Close()
	// Wait for sshd to listen.
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(remote, strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd in %s does not listen: %v", ns, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("root@%s:%d", remote, port), local
}

// prefixWriter logs sshd's output as the test's.
type prefixWriter struct {
	t *testing.T
	p string
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.t.Log(w.p + strings.TrimSpace(string(b)))
	return len(b), nil
}
