// The Host check of the TCP pages (-metrics, -dashboard), against DNS rebinding.

package pageserver

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// AllowedHosts is a -allowed-hosts flag: host names, comma-separated.
type AllowedHosts []string

func (h *AllowedHosts) String() string { return strings.Join(*h, ",") }

func (h *AllowedHosts) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if strings.ContainsAny(n, ":/ ") {
			return fmt.Errorf("%q: want a host name, without port or scheme (say -allowed-hosts metrics.example.com)", n)
		}
		*h = append(*h, normalHost(n))
	}
	return nil
}

// normalHost is a host name as compared: lower case, without the root's trailing dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// HostCheck serves only requests whose Host header names this server: an IP address (any:
// a proxy's, or the host's from another machine, as Prometheus scrapes), localhost, the
// host of listen (the address it was given), or a name in allowed. Any other name is
// refused with 421 (Misdirected Request): that is DNS rebinding, where a page in a browser
// on this host (or this network) loads from a name its author controls, then points that
// name at this address; the browser then lets the page read the answers as its own origin's.
// A name never reaches this server through DNS rebinding unless it is the attacker's, so
// the names it would answer to are the ones someone chose.
func HostCheck(what, listen string, allowed []string, next http.Handler) http.Handler {
	names := map[string]bool{"localhost": true}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
		names[normalHost(h)] = true
	}
	for _, n := range allowed {
		names[normalHost(n)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if _, err := netip.ParseAddr(host); err == nil || host == "" || names[normalHost(host)] {
			next.ServeHTTP(w, r)
			return
		}
		http.Error(w, fmt.Sprintf("%s: Host %q is not a name of this server: it answers to IP addresses, localhost and the names -allowed-hosts gives "+
			"(a page from elsewhere must not read it through DNS rebinding); start the supervisor with -allowed-hosts %s to allow it", what, r.Host, host),
			http.StatusMisdirectedRequest)
	})
}
