package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/configs"
	"github.com/onehost/onehost/internal/balancer"
)

// runFleetConfig is `ceiling fleet-config`: the balancer's configuration for the user's own
// hosts (HAProxy's haproxy.cfg or the nftables ruleset), rendered from the same templates
// and by the same code as the tests' and `ceiling fleet`'s balancers (internal/balancer),
// printed or written to -o, and checked by the balancer itself with -check. It starts
// nothing: a fleet by hand needs no Go code (docs/fleet.md, "Running a fleet by hand: the
// host side").
func runFleetConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFleetConfigFlags(args, stderr)
	if err != nil {
		return err
	}
	out, err := f.render()
	if err != nil {
		return err
	}
	if f.out == "" {
		if f.check {
			if err := f.checkRendering(ctx, out, ""); err != nil {
				return err
			}
		}
		_, err := stdout.Write(out)
		return err
	}
	return f.writeFile(ctx, out)
}

// fleetConfigFlags are `ceiling fleet-config`'s flags.
type fleetConfigFlags struct {
	balancer, listen, balance, tmpl, out  string
	statsSocket, stateFile, statsGroup    string
	hosts                                 hostList
	agentPort                             int
	checkInter, agentInter, serverTimeout time.Duration
	check                                 bool
	set                                   map[string]bool // which flags were given
}

// hostList is the repeatable -host NAME=HOST:PORT, kept as given: parseFleetHosts reads it
// after the flags, so that its errors name the flag and the fix.
type hostList []string

func (h *hostList) String() string     { return strings.Join(*h, " ") }
func (h *hostList) Set(v string) error { *h = append(*h, v); return nil }

// haproxyOnly are the flags that mean something to HAProxy's configuration alone.
var haproxyOnly = []string{"agent-port", "balance", "check-inter", "agent-inter", "server-timeout", "stats-socket", "state-file", "stats-group"}

func parseFleetConfigFlags(args []string, stderr io.Writer) (*fleetConfigFlags, error) {
	f := &fleetConfigFlags{}
	fs := flag.NewFlagSet("ceiling fleet-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.balancer, "balancer", "haproxy", "haproxy (haproxy.cfg) or nft (the nftables ruleset, DNAT in the kernel)")
	fs.Var(&f.hosts, "host", "a host behind the balancer, NAME=HOST:PORT: its name (what `set server hosts/NAME` takes; default hI, I its place from 0), its address and the port its `supervisor run -listen` serves; repeat for each host")
	fs.StringVar(&f.listen, "listen", ":80", "where clients connect: HAProxy's bind (HOST:PORT, or :PORT for every address); for nft VIP:PORT, an IPv4 address of the balancer")
	fs.IntVar(&f.agentPort, "agent-port", balancer.DefaultAgentPort, "the port every host's agent answers on (supervisor run -agent 0.0.0.0:PORT)")
	fs.StringVar(&f.balance, "balance", "roundrobin", "HAProxy's balance: roundrobin or leastconn")
	fs.DurationVar(&f.checkInter, "check-inter", balancer.DefaultInter, "HAProxy's HTTP check interval (GET /health)")
	fs.DurationVar(&f.agentInter, "agent-inter", balancer.DefaultInter, "HAProxy's agent check interval")
	fs.DurationVar(&f.serverTimeout, "server-timeout", balancer.DefaultServerTimeout, "HAProxy's timeout server: how long a request may go unanswered by a host before it is resent (replayable) or answered 504")
	fs.StringVar(&f.statsSocket, "stats-socket", balancer.DefaultStatsSocket, "HAProxy's runtime API socket (admin level; root's, mode 600)")
	fs.StringVar(&f.stateFile, "state-file", balancer.DefaultStateFile, "HAProxy's server-state file, saved from `show servers state` before a reload")
	fs.StringVar(&f.statsGroup, "stats-group", "", "an operator group that may use the runtime API socket too (mode 660)")
	fs.StringVar(&f.tmpl, "template", "", "the template to fill (default: configs/haproxy/haproxy.cfg or configs/nftables/balancer.nft as built into this binary)")
	fs.StringVar(&f.out, "o", "", "write the result to this file, replaced only once it is rendered (and checked with -check); default: standard output")
	fs.BoolVar(&f.check, "check", false, "have the balancer check the result first: haproxy -c, or nft -c (root)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("fleet-config: unexpected argument %q: every host is a flag, -host NAME=HOST:PORT", fs.Arg(0))
	}
	f.set = explicit(fs)
	return f, nil
}

// render fills the template of the chosen balancer.
func (f *fleetConfigFlags) render() ([]byte, error) {
	nft := false
	switch f.balancer {
	case "haproxy":
	case "nft", "nftables":
		nft = true
	default:
		return nil, fmt.Errorf("fleet-config: -balancer %q: want haproxy or nft", f.balancer)
	}
	hosts, err := parseFleetHosts(f.hosts, nft)
	if err != nil {
		return nil, err
	}
	builtIn := configs.HAProxy
	if nft {
		builtIn = configs.NftBalancer
	}
	tmpl, err := configs.Read(f.tmpl, builtIn)
	if err != nil {
		return nil, fmt.Errorf("fleet-config: -template: %w", err)
	}
	if nft {
		return f.renderNft(tmpl, hosts)
	}
	return f.renderHAProxy(tmpl, hosts)
}

func (f *fleetConfigFlags) renderHAProxy(tmpl []byte, hosts []fleetHost) ([]byte, error) {
	if _, _, err := splitListen(f.listen); err != nil {
		return nil, fmt.Errorf("fleet-config: -listen %q: %w: e.g. -listen :80 (every address) or -listen 10.0.0.100:80", f.listen, err)
	}
	if f.agentPort < 1 || f.agentPort > 65535 {
		return nil, fmt.Errorf("fleet-config: -agent-port %d: want 1-65535, the port of the hosts' `supervisor run -agent`", f.agentPort)
	}
	if f.balance != "roundrobin" && f.balance != "leastconn" {
		return nil, fmt.Errorf("fleet-config: -balance %q: want roundrobin or leastconn", f.balance)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"check-inter", f.checkInter}, {"agent-inter", f.agentInter}, {"server-timeout", f.serverTimeout}} {
		if d.v < time.Millisecond {
			return nil, fmt.Errorf("fleet-config: -%s %v: want at least 1ms (HAProxy counts in milliseconds)", d.name, d.v)
		}
	}
	servers := make([]balancer.Server, len(hosts))
	for i, h := range hosts {
		servers[i] = balancer.Server{Name: h.name, Addr: net.JoinHostPort(h.host, strconv.Itoa(h.port))}
	}
	out, err := balancer.RenderHAProxy(tmpl, balancer.HAProxyParams{
		Listen: f.listen, Servers: servers, Balance: f.balance, AgentPort: f.agentPort,
		CheckInter: f.checkInter, AgentInter: f.agentInter, ServerTimeout: f.serverTimeout,
		StatsSocket: f.statsSocket, StateFile: f.stateFile, StatsGroup: f.statsGroup,
	})
	if err != nil {
		// What the flags above left to check (the paths, the group's name) the package names
		// by its fields: say the flags instead.
		return nil, fmt.Errorf("fleet-config: %s", paramFlags.Replace(err.Error()))
	}
	return out, nil
}

func (f *fleetConfigFlags) renderNft(tmpl []byte, hosts []fleetHost) ([]byte, error) {
	for _, name := range haproxyOnly {
		if f.set[name] {
			return nil, fmt.Errorf("fleet-config: -%s is HAProxy's: the nftables ruleset has no checks, agent or runtime API (drop the flag, or -balancer haproxy)", name)
		}
	}
	vip, port, err := splitListen(f.listen)
	if err == nil && (vip == nil || vip.To4() == nil) {
		err = errors.New("the nftables balancer needs the IPv4 address clients connect to, one of this machine's")
	}
	if err != nil {
		return nil, fmt.Errorf("fleet-config: -listen %q: %w: e.g. -listen 10.0.0.100:80", f.listen, err)
	}
	live := make([]balancer.NftHost, len(hosts))
	for i, h := range hosts {
		if h.port != hosts[0].port {
			return nil, fmt.Errorf("fleet-config: -host %s: port %d, but %s's is %d: the nftables rule sends every connection to one port, so serve every host on the same one",
				h.flag, h.port, hosts[0].name, hosts[0].port)
		}
		live[i] = balancer.NftHost{Addr: h.host}
	}
	return balancer.RenderNft(tmpl, balancer.NftParams{VIP: vip.String(), Port: port, HostPort: hosts[0].port, Live: live})
}

// paramFlags names the flag of each HAProxyParams field in RenderHAProxy's errors.
var paramFlags = strings.NewReplacer("StatsSocket ", "-stats-socket ", "StateFile ", "-state-file ", "StatsGroup ", "-stats-group ")

// splitListen reads -listen: HOST:PORT or :PORT, HOST an IP address (nil for :PORT).
func splitListen(s string) (net.IP, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, 0, errors.New("want HOST:PORT or :PORT")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return nil, 0, fmt.Errorf("port %q: want 1-65535", port)
	}
	if host == "" {
		return nil, p, nil
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, 0, fmt.Errorf("%q is not an IP address of this machine", host)
	}
	return ip, p, nil
}

// checkRendering has the balancer check out, written to path (a temporary file when "").
func (f *fleetConfigFlags) checkRendering(ctx context.Context, out []byte, path string) error {
	if f.balancer != "haproxy" {
		if err := balancer.CheckNft(ctx, nil, out); err != nil {
			return fmt.Errorf("fleet-config: -check: %w", err)
		}
		return nil
	}
	if path == "" {
		tmp, err := os.CreateTemp("", "fleet-config-*.cfg")
		if err != nil {
			return fmt.Errorf("fleet-config: -check: %w", err)
		}
		defer os.Remove(tmp.Name())
		_, err = tmp.Write(out)
		if err = errors.Join(err, tmp.Close()); err != nil {
			return fmt.Errorf("fleet-config: -check: %w", err)
		}
		path = tmp.Name()
	}
	if err := balancer.CheckHAProxy(ctx, "", path); err != nil {
		return fmt.Errorf("fleet-config: -check: %w", err)
	}
	return nil
}

// writeFile writes out to -o through a temporary file beside it, checked there with
// -check, so that a failed rendering or check leaves the file as it was (a balancer's
// configuration replaced only by one that works).
func (f *fleetConfigFlags) writeFile(ctx context.Context, out []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(f.out), "."+filepath.Base(f.out)+".*")
	if err != nil {
		return fmt.Errorf("fleet-config: -o: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; removed when something failed
	_, err = tmp.Write(out)
	if err == nil {
		err = tmp.Chmod(0o644) // HAProxy's master reads it as root; it holds no secret
	}
	if err = errors.Join(err, tmp.Close()); err != nil {
		return fmt.Errorf("fleet-config: -o: %w", err)
	}
	if f.check {
		if err := f.checkRendering(ctx, out, tmp.Name()); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), f.out); err != nil {
		return fmt.Errorf("fleet-config: -o: %w", err)
	}
	return nil
}
