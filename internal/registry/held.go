package registry

import (
	"encoding/json"

	"github.com/onehost/onehost/internal/control"
)

// Held states of an app across an upgrade: the apps that do not run as the configuration
// says, which the next image must leave so rather than start them again.
const (
	HeldStopped = "stopped" // `stop APP`
	HeldDeleted = "deleted" // `delete APP`
)

// DumpApps are the apps as `supervisor save` keeps them: each one's mode, state and scale.
func (r *Registry) DumpApps() []control.DumpApp {
	var out []control.DumpApp
	for _, a := range r.live() {
		da := control.DumpApp{Name: a.name, Mode: a.mode(), Status: "stopped"}
		if sup := a.current(); sup != nil {
			da.Status, da.Instances = "running", len(sup.Status())
		}
		out = append(out, da)
	}
	return out
}

// Held is what the next image must leave as it is (the daemon passes it across an
// upgrade's exec): a JSON object of app name to HeldStopped or HeldDeleted, "" when every
// app runs.
func (r *Registry) Held() string {
	held := map[string]string{}
	for _, a := range r.apps {
		a.mu.Lock()
		switch {
		case a.deleted:
			held[a.name] = HeldDeleted
		case a.sup == nil:
			held[a.name] = HeldStopped
		}
		a.mu.Unlock()
	}
	if len(held) == 0 {
		return ""
	}
	b, _ := json.Marshal(held) // a map of strings always marshals
	return string(b)
}
