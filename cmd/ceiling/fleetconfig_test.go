package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/balancer"
	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/proctest"
)

func needHAProxy(t *testing.T) {
	t.Helper()
	if _, err := balancer.LookHAProxy(); err != nil {
		proctest.Missing(t, err.Error())
	}
}

func needNft(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		proctest.Missing(t, "nft -c needs root (CAP_NET_ADMIN) to have the kernel check a ruleset")
	}
	if _, err := balancer.LookNft(); err != nil {
		proctest.Missing(t, err.Error())
	}
}

// runFleetConfigOut runs `ceiling fleet-config args...` in-process and returns what it printed.
func runFleetConfigOut(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), append([]string{"fleet-config"}, args...), func(string) string { return "" }, &out, &errb)
	return out.Bytes(), err
}

// TestFleetConfig renders the balancers' configurations for hosts named on the command
// line, compares them with golden files (go test -update rewrites them) and has the
// balancers check them: haproxy -c, and nft -c (root). HAProxy's keeps the production
// defaults: workers as haproxy:haproxy in the chroot, the agent on 9777.
func TestFleetConfig(t *testing.T) {
	two := []string{"-host", "h1=10.0.0.1:3000", "-host", "h2=10.0.0.2:3000"}
	for _, tc := range []struct {
		name, golden string
		args         []string
		want         []string
	}{
		{"haproxy defaults", "fleet-config-haproxy.cfg", two, []string{
			"    bind :80\n", "agent-check agent-port 9777 ", "    user haproxy\n    group haproxy\n    chroot /var/lib/haproxy\n",
			"stats socket /run/haproxy/onehost-admin.sock mode 600 level admin", "    server h1 10.0.0.1:3000\n    server h2 10.0.0.2:3000\n",
		}},
		{"haproxy with every flag", "fleet-config-haproxy-flags.cfg", []string{
			"-balancer", "haproxy", "-host", "10.0.0.1:3000", "-host", "b=[fd00::2]:3001", "-host", "c=localhost:3002",
			"-listen", "127.0.0.1:8080", "-agent-port", "9778", "-balance", "leastconn", "-check-inter", "500ms",
			"-agent-inter", "1s", "-server-timeout", "10s", "-stats-socket", "/tmp/fleet/admin.sock",
			"-state-file", "/tmp/fleet/server-state", "-stats-group", "adm",
		}, []string{
			"    bind 127.0.0.1:8080\n", "balance leastconn", "inter 500ms", "agent-port 9778 agent-inter 1000ms", "timeout server 10000ms",
			"stats socket /tmp/fleet/admin.sock mode 660 user root group adm level admin", "server-state-file /tmp/fleet/server-state",
			"    server h0 10.0.0.1:3000\n    server b [fd00::2]:3001\n    server c localhost:3002\n",
		}},
		{"nft", "fleet-config-nft.nft", append([]string{"-balancer", "nft", "-listen", "10.0.0.100:80"}, two...), []string{
			"ip daddr 10.0.0.100 tcp dport 80 dnat to numgen inc mod 8 map { 0 : 10.0.0.1, 1 : 10.0.0.1, 2 : 10.0.0.1, 3 : 10.0.0.1, 4 : 10.0.0.2, 5 : 10.0.0.2, 6 : 10.0.0.2, 7 : 10.0.0.2 } : 3000",
		}},
		{"nftables, hosts on port 80", "fleet-config-nft-80.nft", []string{"-balancer", "nftables", "-listen", "192.168.1.10:80",
			"-host", "a=192.168.1.11:80", "-host", "b=192.168.1.12:80", "-host", "c=192.168.1.13:80"}, []string{
			"ip daddr 192.168.1.10 tcp dport 80 dnat to numgen inc mod 12 map { ", "11 : 192.168.1.13 } : 80",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runFleetConfigOut(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("output lacks %q", w)
				}
			}
			goldentest.Check(t, tc.golden, out)
			if strings.HasSuffix(tc.golden, ".nft") {
				needNft(t)
				if err := balancer.CheckNft(context.Background(), nil, out); err != nil {
					t.Fatal(err)
				}
				return
			}
			needHAProxy(t)
			path := filepath.Join(t.TempDir(), "haproxy.cfg")
			if err := os.WriteFile(path, out, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := balancer.CheckHAProxy(context.Background(), "", path); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFleetConfigCheckAndFile: -check has the balancer check the result, -o writes it only
// once rendered and checked: a rendering HAProxy refuses (a name it cannot resolve) leaves
// the file as it was, and no temporary file beside it.
func TestFleetConfigCheckAndFile(t *testing.T) {
	needHAProxy(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "haproxy.cfg")
	if _, err := runFleetConfigOut(t, "-host", "h1=127.0.0.1:3000", "-check", "-o", path); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(good, []byte("server h1 127.0.0.1:3000")) {
		t.Fatalf("-o wrote %q", good)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (HAProxy's master reads it; it holds no secret)", fi.Mode().Perm())
	}
	_, err = runFleetConfigOut(t, "-host", "h1=host-that-does-not-resolve.invalid:3000", "-check", "-o", path)
	if err == nil || !strings.Contains(err.Error(), "fleet-config: -check: check haproxy config") || !strings.Contains(err.Error(), "could not resolve address") {
		t.Fatalf("got %v, want haproxy -c's complaint about the address", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, good) {
		t.Errorf("a refused rendering replaced the file")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left beside it: %v", ents)
	}
	// Without -o, -check prints only what passed.
	out, err := runFleetConfigOut(t, "-host", "h1=host-that-does-not-resolve.invalid:3000", "-check")
	if err == nil || len(out) != 0 {
		t.Errorf("got %v and %d bytes, want an error and nothing printed", err, len(out))
	}
	if out, err = runFleetConfigOut(t, "-host", "h1=127.0.0.1:3000", "-check"); err != nil || !bytes.Contains(out, []byte("server h1 127.0.0.1:3000")) {
		t.Errorf("got %v, %q", err, out)
	}
	t.Run("nft", func(t *testing.T) {
		needNft(t)
		p := filepath.Join(t.TempDir(), "balancer.nft")
		if _, err := runFleetConfigOut(t, "-balancer", "nft", "-listen", "10.0.0.100:80", "-host", "h1=10.0.0.1:3000", "-check", "-o", p); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); !bytes.Contains(b, []byte("dnat to numgen inc mod 4 map")) {
			t.Errorf("-o wrote %q", b)
		}
	})
}

// TestFleetConfigErrors: each mistake is refused with the flag as given and the fix.
func TestFleetConfigErrors(t *testing.T) {
	nft := []string{"-balancer", "nft", "-listen", "10.0.0.100:80"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no host", nil, "no -host: name each host behind the balancer, e.g. -host h1=10.0.0.1:3000"},
		{"a host without a port", []string{"-host", "h1=10.0.0.1"}, "-host h1=10.0.0.1: no port: write h1=10.0.0.1:3000, the port of that host's `supervisor run -listen`"},
		{"an unnamed host without a port", []string{"-host", "10.0.0.1"}, "-host 10.0.0.1: no port: write h0=10.0.0.1:3000"},
		{"an empty port", []string{"-host", "h1=10.0.0.1:"}, `-host h1=10.0.0.1:: port "": want 1-65535`},
		{"a port out of range", []string{"-host", "h1=10.0.0.1:70000"}, `port "70000": want 1-65535`},
		{"a port that is a name", []string{"-host", "h1=10.0.0.1:http"}, `port "http": want 1-65535`},
		{"a duplicate name", []string{"-host", "h1=10.0.0.1:3000", "-host", "h1=10.0.0.2:3000"},
			"-host h1=10.0.0.2:3000: the name h1 is taken already (-host h1=10.0.0.1:3000): give each host a name of its own"},
		{"a default name taken", []string{"-host", "10.0.0.1:3000", "-host", "h0=10.0.0.2:3000"}, "the name h0 is taken already (-host 10.0.0.1:3000)"},
		{"a duplicate address", []string{"-host", "a=10.0.0.1:3000", "-host", "b=10.0.0.1:3000"},
			"-host b=10.0.0.1:3000: 10.0.0.1:3000 is given already (-host a=10.0.0.1:3000): each host once"},
		{"a duplicate address spelt otherwise", []string{"-host", "a=[fd00::1]:3000", "-host", "b=[fd00:0::1]:3000"}, "[fd00::1]:3000 is given already"},
		{"a bad address", []string{"-host", "h1=10.0.0.300:3000"}, `-host h1=10.0.0.300:3000: "10.0.0.300" is neither an IP address nor a DNS name`},
		{"a bad name in the address", []string{"-host", "h1=my_host:3000"}, `"my_host" is neither an IP address nor a DNS name`},
		{"no address", []string{"-host", "h1=:3000"}, "no address: write h1=ADDRESS:3000 with the host's own address"},
		{"the listening address", []string{"-host", "h1=0.0.0.0:3000"}, "0.0.0.0 is where a host listens, not where the balancer finds it"},
		{"IPv6 without brackets", []string{"-host", "h1=fd00::1"}, "an IPv6 address goes in brackets, the port after them: h1=[IPV6]:PORT"},
		{"a bad host name", []string{"-host", "h 1=10.0.0.1:3000"}, `name "h 1": use letters, digits, '-', '_' and '.'`},
		{"an argument", []string{"10.0.0.1:3000"}, `unexpected argument "10.0.0.1:3000": every host is a flag, -host NAME=HOST:PORT`},
		{"an unknown balancer", []string{"-balancer", "ipvs", "-host", "h1=10.0.0.1:3000"}, `-balancer "ipvs": want haproxy or nft`},
		{"a listen without a port", []string{"-host", "h1=10.0.0.1:3000", "-listen", "80"}, `-listen "80": want HOST:PORT or :PORT`},
		{"a listen on a name", []string{"-host", "h1=10.0.0.1:3000", "-listen", "lb:80"}, `-listen "lb:80": "lb" is not an IP address of this machine`},
		{"a bad agent port", []string{"-host", "h1=10.0.0.1:3000", "-agent-port", "0"}, "-agent-port 0: want 1-65535"},
		{"a bad balance", []string{"-host", "h1=10.0.0.1:3000", "-balance", "random"}, `-balance "random": want roundrobin or leastconn`},
		{"a zero interval", []string{"-host", "h1=10.0.0.1:3000", "-agent-inter", "0s"}, "-agent-inter 0s: want at least 1ms"},
		{"a relative socket", []string{"-host", "h1=10.0.0.1:3000", "-stats-socket", "admin.sock"}, `-stats-socket "admin.sock" is not absolute`},
		{"a state file with a space", []string{"-host", "h1=10.0.0.1:3000", "-state-file", "/var/lib/my state"}, `-state-file "/var/lib/my state": a space`},
		{"a bad group", []string{"-host", "h1=10.0.0.1:3000", "-stats-group", "ops team"}, `-stats-group "ops team": use letters`},
		{"a missing template", []string{"-host", "h1=10.0.0.1:3000", "-template", "/nonexistent/haproxy.cfg"}, "-template: open /nonexistent/haproxy.cfg"},
		{"nft without a VIP", []string{"-balancer", "nft", "-host", "h1=10.0.0.1:3000"}, `-listen ":80": the nftables balancer needs the IPv4 address clients connect to`},
		{"nft on IPv6", []string{"-balancer", "nft", "-listen", "[fd00::1]:80", "-host", "h1=10.0.0.1:3000"}, "needs the IPv4 address"},
		{"nft with a host name", append(slices.Clone(nft), "-host", "h1=web1.example:3000"), `"web1.example" is not an IPv4 address: the nftables balancer takes the host's IPv4 address, not a name`},
		{"nft with an IPv6 host", append(slices.Clone(nft), "-host", "h1=[fd00::1]:3000"), "fd00::1: the nftables balancer (table ip) takes IPv4 addresses only"},
		{"nft with two ports", append(slices.Clone(nft), "-host", "h1=10.0.0.1:3000", "-host", "h2=10.0.0.2:3001"),
			"-host h2=10.0.0.2:3001: port 3001, but h1's is 3000: the nftables rule sends every connection to one port"},
		{"nft with HAProxy's flag", append(slices.Clone(nft), "-host", "h1=10.0.0.1:3000", "-agent-port", "9777"), "-agent-port is HAProxy's: the nftables ruleset has no checks, agent or runtime API"},
		{"nft with HAProxy's socket", append(slices.Clone(nft), "-host", "h1=10.0.0.1:3000", "-stats-socket", "/run/x.sock"), "-stats-socket is HAProxy's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runFleetConfigOut(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
			if len(out) != 0 {
				t.Errorf("printed %d bytes with the error", len(out))
			}
		})
	}
}

// FuzzFleetHost: parseFleetHost never panics, and what it accepts is a host HAProxy can
// take: a valid name, a port in range, an address that is an IP or a DNS name, which reads
// back the same from its own NAME=HOST:PORT.
func FuzzFleetHost(f *testing.F) {
	for _, s := range []string{"h1=10.0.0.1:3000", "10.0.0.1:3000", "h1=[fd00::1]:3000", "a=localhost:80", "h1=10.0.0.1",
		"h1=fe80::1", "=:", "h1=:3000", "h1=0.0.0.0:3000", "a=b=c:1", "h1=10.0.0.300:3000", "h=[::ffff:10.0.0.1]:1"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, v string, ipv4 bool) {
		h, err := parseFleetHost(v, 3, ipv4)
		if err != nil {
			return
		}
		if !balancer.ValidName(h.name) || h.port < 1 || h.port > 65535 || h.host == "" {
			t.Fatalf("%q accepted as %+v", v, h)
		}
		ip := net.ParseIP(h.host)
		if ip == nil && (ipv4 || !validDNSName(h.host)) || ip != nil && (ip.IsUnspecified() || ipv4 && ip.To4() == nil) {
			t.Fatalf("%q accepted with address %q", v, h.host)
		}
		again, err := parseFleetHost(h.name+"="+net.JoinHostPort(h.host, strconv.Itoa(h.port)), 0, ipv4)
		if err != nil || again.name != h.name || again.host != h.host || again.port != h.port {
			t.Fatalf("%q read as %+v; its own spelling as %+v, %v", v, h, again, err)
		}
	})
}
