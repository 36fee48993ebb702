package balancer

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// NftHost is one host behind the nftables balancer.
type NftHost struct {
	// Addr is the host's IPv4 address; it serves on NftParams.HostPort.
	Addr string
	// Weight is a percentage (the agent's "N%"); 0 means 100; above MaxAgentWeight counts
	// as MaxAgentWeight. A host is dealt round(Weight/25) entries of the round-robin map,
	// at least one, so weights are approximated in quarters (at most 10 entries a host).
	Weight int
}

// NftParams fill configs/nftables/balancer.nft.
type NftParams struct {
	// VIP is the balancer's IPv4 address the clients connect to (@VIP@).
	VIP string
	// Port is the port the clients connect to (@PORT@).
	Port int
	// HostPort is the port the hosts serve on. Default: Port.
	HostPort int
	// Live are the hosts that take new connections, in map order. None: the rule is left
	// out and connections are refused.
	Live []NftHost
}

// RenderNft fills tmpl from p.
func RenderNft(tmpl []byte, p NftParams) ([]byte, error) {
	const what = "render nftables ruleset"
	if ip := net.ParseIP(p.VIP); ip == nil || ip.To4() == nil {
		return nil, fmt.Errorf("%s: VIP %q: want the balancer's IPv4 address", what, p.VIP)
	}
	if p.Port <= 0 || p.Port > 65535 {
		return nil, fmt.Errorf("%s: Port %d: want 1-65535", what, p.Port)
	}
	hostPort := orInt(p.HostPort, p.Port)
	var entries []string
	for i, h := range p.Live {
		if ip := net.ParseIP(h.Addr); ip == nil || ip.To4() == nil {
			return nil, fmt.Errorf("%s: Live[%d].Addr %q: want an IPv4 address", what, i, h.Addr)
		}
		n := max(1, (min(orInt(h.Weight, 100), MaxAgentWeight)+12)/25)
		for range n {
			entries = append(entries, strconv.Itoa(len(entries))+" : "+h.Addr)
		}
	}
	rule := "\t\t# (none live)"
	if len(entries) > 0 {
		rule = fmt.Sprintf("\t\tip daddr %s tcp dport %d dnat to numgen inc mod %d map { %s } : %d",
			p.VIP, p.Port, len(entries), strings.Join(entries, ", "), hostPort)
	}
	return render(what, tmpl, map[string]string{
		"@VIP@":  p.VIP,
		"@PORT@": strconv.Itoa(p.Port),
		"@RULE@": rule,
	})
}

// CheckNft runs `nft -c -f -` on ruleset: the kernel checks it, nothing is loaded. nft is
// argv[0] with its leading arguments (e.g. {"ip", "netns", "exec", "lb", "nft"}); nil
// means LookNft.
func CheckNft(ctx context.Context, nft []string, ruleset []byte) error {
	return runNft(ctx, nft, ruleset, "-c")
}

// LoadNft loads ruleset with `nft -f -` (the table is replaced in one transaction).
func LoadNft(ctx context.Context, nft []string, ruleset []byte) error {
	return runNft(ctx, nft, ruleset)
}

func runNft(ctx context.Context, nft []string, ruleset []byte, flags ...string) error {
	if len(nft) == 0 {
		bin, err := LookNft()
		if err != nil {
			return err
		}
		nft = []string{bin}
	}
	argv := append(append(slices.Clone(nft), flags...), "-f", "-")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("run %s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// DefaultFall is Checker.Fall's default, the template's HAProxy fall.
const DefaultFall = 2

// Checker keeps the nftables balancer's map of live hosts following the hosts' agents.
type Checker struct {
	// Template is configs/nftables/balancer.nft; Params its VIP, ports and (ignored) Live.
	Template []byte
	Params   NftParams
	// Hosts are all the hosts' addresses, in map order.
	Hosts []string
	// AgentPort is the port of every host's agent. Default DefaultAgentPort.
	AgentPort int
	// Agents, when set, are the agents' HOST:PORT, one per host (instead of the host's
	// address and AgentPort).
	Agents []string
	// Interval between two rounds of asking the agents. Default DefaultInter.
	Interval time.Duration
	// Fall is how many rounds in a row a live host's agent must go unanswered before the
	// host is out (HAProxy's fall). An answer that says drain, down … takes it out at once;
	// a single late answer does not (on a loaded machine an agent can miss one short
	// interval: with Fall 1 the last live host could leave the map, and every new
	// connection be refused, for a round). Default DefaultFall.
	Fall int
	// Nft is the nft command (see CheckNft); nil: LookNft.
	Nft []string
	// Log receives each change of the live set. nil: none.
	Log *zap.Logger
	// OnLoad, when set, is called after each load with the live hosts (tests wait on it).
	OnLoad func(live []NftHost)
}

// Run asks every agent each Interval and loads the ruleset whenever the live set (or a
// weight) changed, the first round included, until ctx ends. A host whose agent does not
// answer within the interval Fall rounds in a row is out (in the first round, at once).
// It returns ctx's error (also when ctx ended during a load), or the first load that
// failed.
func (c *Checker) Run(ctx context.Context) error {
	interval := c.Interval
	if interval <= 0 {
		interval = DefaultInter
	}
	port := strconv.Itoa(orInt(c.AgentPort, DefaultAgentPort))
	fall := orInt(c.Fall, DefaultFall)
	var last []NftHost
	misses := make([]int, len(c.Hosts)) // rounds in a row each host's agent went unanswered
	first := true
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		live := make([]NftHost, 0, len(c.Hosts))
		for i, h := range c.Hosts {
			agent := net.JoinHostPort(h, port)
			if i < len(c.Agents) {
				agent = c.Agents[i]
			}
			st, err := AskAgent(ctx, agent, interval)
			if err != nil {
				misses[i]++
			} else {
				misses[i] = 0
			}
			prev := slices.IndexFunc(last, func(l NftHost) bool { return l.Addr == h })
			switch {
			case err == nil && st.Live:
				live = append(live, NftHost{Addr: h, Weight: st.Weight})
			case err != nil && !first && prev >= 0 && misses[i] < fall:
				live = append(live, last[prev]) // no answer yet: kept as it was, until Fall
			case c.Log != nil && (first || prev >= 0):
				c.Log.Info("host out", zap.String("host", h), zap.String("agent", agent), zap.Any("state", st), zap.Error(err))
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if first || !slices.Equal(live, last) {
			p := c.Params
			p.Live = live
			rs, err := RenderNft(c.Template, p)
			if err != nil {
				return err
			}
			if err := LoadNft(ctx, c.Nft, rs); err != nil {
				if ctx.Err() != nil { // nft killed by the cancel: a stop, not a failed load
					return ctx.Err()
				}
				return err
			}
			if c.Log != nil {
				c.Log.Info("live hosts", zap.Any("live", live))
			}
			if c.OnLoad != nil {
				c.OnLoad(live)
			}
			last, first = live, false
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
