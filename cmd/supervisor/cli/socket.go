package cli

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/onehost/onehost/internal/control"
)

// findSocket lets a command without -socket reach the supervisor of an installed unit:
// when the default socket is not there, the sockets of units (Env.UnitRunDir/NAME/supervisor.sock)
// that this user may trust are the candidates; one is used, and said so on stderr; several
// are refused, listed, since acting on the wrong cluster (a reload, a kill) is worse than
// asking. A -socket given, or a default that exists, is left alone.
func findSocket(flags *flag.FlagSet, socket *string, env Env) error {
	given := false
	flags.Visit(func(f *flag.Flag) { given = given || f.Name == "socket" })
	if given {
		return nil
	}
	if _, err := os.Lstat(*socket); err == nil {
		return nil
	}
	found := control.UnitSockets(cmp.Or(env.UnitRunDir, "/run"))
	switch len(found) {
	case 0:
		return nil // the connection's own error says no supervisor runs
	case 1:
		fmt.Fprintf(env.Stderr, "supervisor: no supervisor at %s; using %s, the control socket of the unit %s (-socket chooses another)\n",
			*socket, found[0], filepath.Base(filepath.Dir(found[0])))
		*socket = found[0]
		return nil
	}
	return fmt.Errorf("no supervisor at %s, and %d units' supervisors run: %s: choose one with -socket PATH",
		*socket, len(found), strings.Join(found, ", "))
}
