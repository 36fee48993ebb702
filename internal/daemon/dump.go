package daemon

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/control"
)

// notInherited are the variables of the supervisor's environment that belong to how systemd
// started it, not to the apps: a dump leaves them out, as it leaves out an upgrade's
// (im.environ has none).
var notInherited = []string{"NOTIFY_SOCKET=", "LISTEN_", "WATCHDOG_"}

// dump is POST /save's body: how this supervisor was started (its arguments, directory
// and environment) and what runs, which `supervisor save` writes to its file.
func (im *image) dump() (control.Dump, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return control.Dump{}, fmt.Errorf("save: %w", err)
	}
	d := control.Dump{Version: control.DumpVersion, SavedAt: time.Now().UTC(), Cwd: cwd, Args: im.cfg.Args, Apps: im.reg.DumpApps()}
	for _, kv := range im.environ {
		if !slices.ContainsFunc(notInherited, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			d.Env = append(d.Env, kv)
		}
	}
	return d, nil
}
