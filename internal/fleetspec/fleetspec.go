// Package fleetspec is the fleet's host list as a user writes it (`supervisor run -fleet
// h1=ADDR,h2=ADDR,h3=ADDR -fleet-self NAME -fleet-dir DIR`, or `fleet:` in the config file):
// parsed, checked with errors that name the field and the fix, and handed from the
// supervisor to the programs it runs through their environment (Env, FromEnv). It knows
// no NATS and no database: the supervisor, which must stay generic, the log node
// (internal/lognode) and the worker (internal/writelog) all read the same list through it.
//
// A host is NAME=ADDR: ADDR a host's IP address or name, the log's ports their defaults
// (clients 4222, routes 6222), or ADDR:PORT for another client port, the route port then
// PORT+2000 (so several hosts on one address, as tests run them, need only distinct
// ports). Every host is given the same list; the one it runs on is Self.
//
// Files: fleetspec.go only.
package fleetspec

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Default ports of a host's log node.
const (
	DefaultClientPort = 4222
	// routeOffset is the route port's distance from the client port (6222 - 4222).
	routeOffset = 2000
)

// Sync settings (Spec.Sync): when the log's nodes fsync what they store.
const (
	// SyncDefault leaves it to JetStream: every 2 minutes, so an acknowledged write is in
	// the page cache of a majority of the hosts, not yet on their disks.
	SyncDefault = ""
	// SyncAlways fsyncs every message before it is acknowledged (JetStream's sync_interval
	// always).
	SyncAlways = "always"
)

// Environment variables that carry a Spec to the programs the supervisor runs.
const (
	EnvHosts = "ONEHOST_FLEET"
	EnvSelf  = "ONEHOST_FLEET_SELF"
	EnvDir   = "ONEHOST_FLEET_DIR"
	EnvSync  = "ONEHOST_FLEET_SYNC"
)

// Host is one host of the fleet.
type Host struct {
	Name string
	Addr string // an IP address or a host name, without port
	// ClientPort is where its log node takes clients; RoutePort, the other nodes.
	ClientPort, RoutePort int
}

// ClientURL is the nats:// URL of the host's log node.
func (h Host) ClientURL() string {
	return "nats://" + net.JoinHostPort(h.Addr, strconv.Itoa(h.ClientPort))
}

// RouteURL is the nats-route:// URL the other nodes reach this one at.
func (h Host) RouteURL() string {
	return "nats-route://" + net.JoinHostPort(h.Addr, strconv.Itoa(h.RoutePort))
}

// String writes the host as ParseHosts reads it.
func (h Host) String() string {
	if h.ClientPort == DefaultClientPort {
		return h.Name + "=" + h.Addr
	}
	return h.Name + "=" + net.JoinHostPort(h.Addr, strconv.Itoa(h.ClientPort))
}

// Spec is a fleet as one host sees it.
type Spec struct {
	Hosts []Host
	Self  string // this host's name, one of Hosts
	// Dir is where this host's log node keeps the log (JetStream's store directory).
	Dir string
	// Sync is SyncDefault or SyncAlways.
	Sync string
}

// name is what a host's name may be: it becomes a NATS server name and subject token.
var name = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

// ParseHosts reads NAME=ADDR[,NAME=ADDR...] (spaces around items ignored).
func ParseHosts(s string) ([]Host, error) {
	var hosts []Host
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n, addr, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("fleet: %q: want NAME=ADDR (e.g. h1=10.0.0.1 or h1=10.0.0.1:4222)", item)
		}
		h, err := parseHost(strings.TrimSpace(n), strings.TrimSpace(addr))
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, errors.New("fleet: no hosts: want NAME=ADDR,NAME=ADDR,... (the same list on every host)")
	}
	return hosts, nil
}

func parseHost(n, addr string) (Host, error) {
	if !name.MatchString(n) {
		return Host{}, fmt.Errorf("fleet: host name %q: use letters, digits, '-' and '_' (at most 63, a letter or digit first)", n)
	}
	h := Host{Name: n, Addr: addr, ClientPort: DefaultClientPort}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		p, perr := strconv.Atoi(port)
		if perr != nil || p < 1 || p > 65535-routeOffset {
			return Host{}, fmt.Errorf("fleet: host %s: port %q: want 1 to %d (the route port is PORT+%d)", n, port, 65535-routeOffset, routeOffset)
		}
		h.Addr, h.ClientPort = host, p
	} else if strings.Count(addr, ":") > 1 && net.ParseIP(addr) == nil {
		return Host{}, fmt.Errorf("fleet: host %s: address %q: want an IP address or a host name, [IPv6]:PORT with a port", n, addr)
	}
	h.Addr = strings.TrimSuffix(strings.TrimPrefix(h.Addr, "["), "]")
	if h.Addr == "" {
		return Host{}, fmt.Errorf("fleet: host %s: no address: want %s=IP or %s=NAME (the address the other hosts reach it at)", n, n, n)
	}
	if net.ParseIP(h.Addr) == nil && !ValidHostname(h.Addr) {
		return Host{}, fmt.Errorf("fleet: host %s: address %q is neither an IP address nor a host name", n, h.Addr)
	}
	if ip := net.ParseIP(h.Addr); ip != nil && ip.IsUnspecified() {
		return Host{}, fmt.Errorf("fleet: host %s: address %s is no address the other hosts can reach: give this host's own IP", n, h.Addr)
	}
	h.RoutePort = h.ClientPort + routeOffset
	return h, nil
}

// ValidHostname says whether s is a DNS host name: labels of letters, digits and '-' (not
// at either end), at most 63 bytes each and 253 in all, no label empty (so no trailing
// '.').
func ValidHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Parse reads a spec from its settings as the flags (or the configuration) give them:
// ParseHosts of hosts, then Validate. A spec that fails Validate is returned with the error.
func Parse(hosts, self, dir, sync string) (Spec, error) {
	list, err := ParseHosts(hosts)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{Hosts: list, Self: self, Dir: dir, Sync: sync}
	return s, s.Validate()
}

// Validate checks the spec: names unique, addresses distinct, Self one of the hosts, Sync
// known, Dir given.
func (s Spec) Validate() error {
	if len(s.Hosts) == 0 {
		return errors.New("fleet: no hosts: want -fleet NAME=ADDR,NAME=ADDR,... (the same list on every host)")
	}
	seen := map[string]bool{}
	ends := map[string]string{}
	for _, h := range s.Hosts {
		if seen[h.Name] {
			return fmt.Errorf("fleet: host name %s appears twice: give each host its own name", h.Name)
		}
		seen[h.Name] = true
		for _, end := range []string{net.JoinHostPort(h.Addr, strconv.Itoa(h.ClientPort)), net.JoinHostPort(h.Addr, strconv.Itoa(h.RoutePort))} {
			if other, ok := ends[end]; ok {
				return fmt.Errorf("fleet: hosts %s and %s both use %s: give one another address or port", other, h.Name, end)
			}
			ends[end] = h.Name
		}
	}
	if s.Self == "" {
		return fmt.Errorf("fleet-self: missing: name the host this is, one of %s", strings.Join(s.Names(), ", "))
	}
	if !seen[s.Self] {
		return fmt.Errorf("fleet-self: %q is not in the fleet's list (%s): give this host's name as -fleet lists it", s.Self, strings.Join(s.Names(), ", "))
	}
	if s.Dir == "" {
		return errors.New("fleet-dir: missing: a directory for this host's copy of the write log (e.g. /var/lib/onehost/log)")
	}
	if s.Sync != SyncDefault && s.Sync != SyncAlways {
		return fmt.Errorf("fleet-sync: %q: want %q (fsync every write before it is acknowledged) or nothing (JetStream's default: every 2 minutes)", s.Sync, SyncAlways)
	}
	return nil
}

// Replicas is how many hosts keep the log: min(3, hosts).
func (s Spec) Replicas() int { return min(3, len(s.Hosts)) }

// Warning says what a fleet of fewer than three hosts gives up, or "".
func (s Spec) Warning() string {
	switch len(s.Hosts) {
	case 1:
		return "fleet of 1 host: the log has one copy; with no other host there is nothing to fail over to (run 3 hosts to survive the loss of one)"
	case 2:
		return "fleet of 2 hosts: the log has 2 copies and needs both to take a write (a raft majority of 2 is 2): writes stop while either host is down; run 3 hosts to survive the loss of one"
	}
	return ""
}

// SelfHost is Self's entry.
func (s Spec) SelfHost() Host {
	i := slices.IndexFunc(s.Hosts, func(h Host) bool { return h.Name == s.Self })
	if i < 0 {
		return Host{}
	}
	return s.Hosts[i]
}

// Names are the hosts' names, in the list's order.
func (s Spec) Names() []string {
	names := make([]string, len(s.Hosts))
	for i, h := range s.Hosts {
		names[i] = h.Name
	}
	return names
}

// ClientURLs are the log nodes' client URLs, this host's first (a client tries them in
// this order: its own host's node, then the others).
func (s Spec) ClientURLs() []string {
	urls := []string{s.SelfHost().ClientURL()}
	for _, h := range s.Hosts {
		if h.Name != s.Self {
			urls = append(urls, h.ClientURL())
		}
	}
	return urls
}

// HostsString writes the list as ParseHosts reads it.
func (s Spec) HostsString() string {
	items := make([]string, len(s.Hosts))
	for i, h := range s.Hosts {
		items[i] = h.String()
	}
	return strings.Join(items, ",")
}

// Env is the spec as environment variables, for the programs the supervisor runs.
func (s Spec) Env() []string {
	env := []string{EnvHosts + "=" + s.HostsString(), EnvSelf + "=" + s.Self, EnvDir + "=" + s.Dir}
	if s.Sync != "" {
		env = append(env, EnvSync+"="+s.Sync)
	}
	return env
}

// FromEnv reads the spec Env wrote; ok is false when EnvHosts is unset (no fleet).
func FromEnv(getenv func(string) string) (s Spec, ok bool, err error) {
	list := getenv(EnvHosts)
	if list == "" {
		return Spec{}, false, nil
	}
	hosts, err := ParseHosts(list)
	if err != nil {
		return Spec{}, true, fmt.Errorf("%s: %w", EnvHosts, err)
	}
	s = Spec{Hosts: hosts, Self: getenv(EnvSelf), Dir: getenv(EnvDir), Sync: getenv(EnvSync)}
	return s, true, s.Validate()
}

// The log's names in JetStream, shared by the node that creates them (internal/lognode)
// and the clients that use them (internal/writelog).
const (
	// Stream is the one stream of writes; its order is the fleet's order of writes.
	Stream = "ONEHOST_WRITES"
	// Subject is what intents are published to (the stream's only subject).
	Subject = "onehost.writes"
	// AppliedSubject prefixes each host's reports of what it has applied
	// (AppliedSubject + "." + host name): plain NATS, not stored.
	AppliedSubject = "onehost.applied"
	// LeavingSubject prefixes the notice a log node sends as its planned stop begins
	// (LeavingSubject + "." + host name): its host's applier reports at once that the host
	// does not serve, so that writes stop waiting for it before it goes silent.
	LeavingSubject = "onehost.leaving"
	// SnapshotBucket is the JetStream object store that holds the latest snapshot of the
	// database, from which a new host starts.
	SnapshotBucket = "onehost-snapshots"
	// Cluster is the NATS cluster's name.
	Cluster = "onehost"
	// Duplicates is how long the stream remembers a message id: a publish retried within
	// it is stored once.
	Duplicates = 2 * time.Minute
)
