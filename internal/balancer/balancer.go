// Package balancer puts several onehost hosts behind one address with engines that exist
// already, rendered from the templates of configs/haproxy (HAProxy 2.6, L7) and
// configs/nftables (DNAT in the kernel, L4):
//
//   - RenderHAProxy fills haproxy.cfg (round robin or least connections; health from the
//     worker's GET /health and from each host's agent; retries of replayable requests;
//     server states kept across reloads; workers as haproxy:haproxy in a chroot, the
//     admin socket root's), CheckHAProxy runs `haproxy -c` on the result,
//     and StartHAProxy runs it for tests and benchmarks: reload, the runtime API on the
//     stats socket (show stat, set server state), stop.
//   - RenderNft fills balancer.nft with the live hosts, CheckNft runs `nft -c`, and Checker
//     polls each host's agent and reloads the table when the set of live hosts changes —
//     the data path stays the kernel's.
//
// Both read the same agent protocol (ParseAgentReply): the one line HAProxy's agent-check
// reads from a TCP port, such as "up 50%", "ready", "drain" or "down", its weight capped
// at MaxAgentWeight as HAProxy caps it.
//
// Like internal/frontproxy it exists so that tests and benchmarks can run the real
// balancers on private files; a production balancer uses the distribution's layout and unit.
package balancer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
)

var placeholder = regexp.MustCompile(`@[A-Z_]+@`)

// render replaces each @NAME@ of tmpl with values["@NAME@"]; what names a placeholder
// missing from values ("render haproxy config") for the error.
func render(what string, tmpl []byte, values map[string]string) ([]byte, error) {
	var err error
	out := placeholder.ReplaceAllFunc(tmpl, func(m []byte) []byte {
		v, ok := values[string(m)]
		if !ok {
			if err == nil {
				err = fmt.Errorf("%s: unknown placeholder %s", what, m)
			}
			return m
		}
		return []byte(v)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lookPath finds a Debian program that lives in /usr/sbin, off a non-root user's PATH.
func lookPath(name string, missing error) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := "/usr/sbin/" + name
	if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
		return p, nil
	}
	return "", missing
}

// Errors of LookHAProxy and LookNft when the program is not installed.
var (
	ErrNoHAProxy = errors.New("haproxy is not installed (apt-get install haproxy)")
	ErrNoNft     = errors.New("nft is not installed (apt-get install nftables)")
)

// LookHAProxy returns the haproxy binary: haproxy on $PATH, else /usr/sbin/haproxy.
func LookHAProxy() (string, error) { return lookPath("haproxy", ErrNoHAProxy) }

// LookNft returns the nft binary: nft on $PATH, else /usr/sbin/nft.
func LookNft() (string, error) { return lookPath("nft", ErrNoNft) }
