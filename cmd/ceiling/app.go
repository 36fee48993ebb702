package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/onehost/onehost/internal/ceiling"
)

// appFlags are `ceiling sweep`'s flags for the user's own app: the program, and its
// request as autocannon's flags describe it.
type appFlags struct {
	app, config    string
	method, path   string
	headers        headerList
	body           string
	set            map[string]bool // which flags were given
	argv           []string
	script         string
	scriptArgs     []string
	pm2Unavailable string // why PM2 cannot run the same app; "" it can
}

// headerList is a repeatable -H "Name: value".
type headerList []string

func (h *headerList) String() string { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error {
	if !strings.Contains(v, ":") {
		return fmt.Errorf("header %q: want \"Name: value\"", v)
	}
	*h = append(*h, v)
	return nil
}

func addAppFlags(fs *flag.FlagSet) *appFlags {
	a := &appFlags{}
	fs.StringVar(&a.app, "app", "", "sweep your own program instead of our worker: a command run under the supervisor at each N (`supervisor run -instances N -- COMMAND`): an unmodified Node app ('node server.js': its listen(PORT) gets the slot's socket), or any program taking the socket at fd 3; split at spaces, no quoting")
	fs.StringVar(&a.config, "app-config", "", "with or instead of -app: the supervisor's configuration for your app (our YAML, e.g. self_bind: true with a fixed listen, or a PM2 ecosystem file of one app)")
	fs.StringVar(&a.method, "m", "GET", "with -app: the request's method (autocannon -m)")
	fs.StringVar(&a.path, "path", "/", "with -app: the request's path and query")
	fs.Var(&a.headers, "H", "with -app: a request header \"Name: value\" (autocannon -H; repeatable)")
	fs.StringVar(&a.body, "b", "", "with -app: the request's body (autocannon -b)")
	return a
}

// check says which combinations make no sense, naming the fix, and works out the
// program and the script PM2 would run.
func (a *appFlags) check(set map[string]bool, modes []string) error {
	a.set = set
	on := a.app != "" || a.config != ""
	if !on {
		for _, f := range []string{"m", "path", "H", "b"} {
			if set[f] {
				return fmt.Errorf("sweep: -%s describes your app's request: give the app too (-app 'node server.js' or -app-config FILE)", f)
			}
		}
		return nil
	}
	if strings.ContainsAny(a.app, `"'\`) {
		return fmt.Errorf("sweep: -app %q: the command is split at spaces and quotes are not understood: put it in a script, or in -app-config's command", a.app)
	}
	for _, f := range []string{"workloads", "peer-heavy", "mix-script", "tokens", "seed"} {
		if set[f] {
			return fmt.Errorf("sweep: -%s is for our worker's workloads: with -app the request is -m, -path, -H and -b", f)
		}
	}
	for _, m := range modes {
		if m != ceiling.ModeCluster && m != ceiling.ModePM2 {
			return fmt.Errorf("sweep: -modes %s with -app: your app runs as cluster (under the supervisor) and pm2 (the same app under PM2): say -modes cluster,pm2", m)
		}
	}
	a.argv = strings.Fields(a.app)
	if s, args, ok := ceiling.NodeScript(a.argv); ok {
		a.script, a.scriptArgs = s, args
	} else if a.config != "" && len(a.argv) == 0 {
		a.pm2Unavailable = "-app-config alone: PM2 needs the script (-app 'node SCRIPT')"
	} else {
		a.pm2Unavailable = fmt.Sprintf("-app %q is not `node SCRIPT [ARGS]` (node options and other programs are not carried to PM2)", a.app)
	}
	return nil
}

// workload is the app's request.
func (a *appFlags) workload() ceiling.Workload {
	return ceiling.AppRequest(a.method, a.path, a.headers, a.body)
}
