package floors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/onehost/onehost/"

var (
	supervisor = []string{"cmd/supervisor", "cmd/supervisor/cli", "internal/daemon", "internal/registry", "internal/control",
		"internal/applog", "internal/monit", "internal/appspec", "internal/detach", "internal/pageserver", "internal/subreaper", "internal/agent"}
	engine = []string{"internal/cluster", "internal/ipc", "internal/steering", "internal/cron", "internal/filewatch", "internal/procstat", "internal/systemd"}
	// workloads are what the workers serve.
	workloads = []string{"internal/feed", "internal/http1", "internal/heavy", "internal/shop", "internal/token", "internal/owner",
		"internal/sqlitec", "internal/schema", "internal/seed", "internal/writepath", "internal/contentcoding", "internal/jsonstr", "internal/urlquery"}
	workers = append([]string{"cmd/worker"}, workloads...)
	// instruments measure; none ships to production.
	instruments = []string{"internal/ceiling", "internal/challenge", "internal/loadgen", "internal/journey", "internal/genhealth",
		"internal/histlog", "internal/loadhosts", "internal/fleetns", "internal/balancer", "internal/cpuquota", "internal/frontproxy",
		"internal/srcaddr", "internal/httpframe", "internal/seedtest", "internal/proctest", "internal/goldentest"}
	// fleetLog is the fleet's write log (NATS JetStream): its node, and the client the
	// workers publish and apply with. Only cmd/worker and cmd/lognode link it.
	fleetLog = []string{"cmd/lognode", "internal/lognode", "internal/writelog"}
	nats     = []string{"github.com/nats-io"}
	leaves   = []string{"internal/jsonstr", "internal/urlquery", "internal/sqlitec", "internal/schema", "internal/safepath", "internal/buildinfo", "internal/writepath", "internal/procstat", "internal/progress", "internal/fleetspec"}
	// others: the instruments' commands and the experiments, the configurations, this test.
	others   = []string{"cmd", "bench", "configs", "internal/floors"}
	shipped  = []string{"cmd/supervisor", "cmd/worker", "cmd/lognode"}
	supAbove = []string{"cmd/supervisor/cli", "internal/daemon", "internal/registry", "internal/control", "internal/applog", "internal/monit",
		"internal/appspec", "internal/detach", "internal/pageserver"}
)

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// graph is every package of the module, by its path within the module, each with its
// direct imports and every package it links (Deps), read once for every test.
func graph(t *testing.T) map[string]pkg {
	t.Helper()
	g, err := readGraph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var readGraph = sync.OnceValues(func() (map[string]pkg, error) {
	out, err := exec.Command("go", "list", "-json", "-deps=false", module+"...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	g := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		trim := func(s []string) []string {
			var o []string
			for _, x := range s {
				o = append(o, strings.TrimPrefix(x, module))
			}
			return o
		}
		p.Imports, p.Deps = trim(p.Imports), trim(p.Deps)
		g[p.ImportPath] = p
	}
	return g, nil
})

// under says whether p is one of the roots or a package below one (internal/monit/monittest
// is internal/monit's).
func under(p string, roots []string) bool {
	return slices.ContainsFunc(roots, func(r string) bool { return p == r || strings.HasPrefix(p, r+"/") })
}

// TestFloors: no package of a floor reaches, through its imports, one it must not know.
func TestFloors(t *testing.T) {
	g := graph(t)
	if len(g) < 40 {
		t.Fatalf("go list found %d packages: not the module", len(g))
	}
	rules := []struct {
		name        string
		from, never []string
		deps        bool // transitive (every package it links), else direct imports
	}{
		{"the supervisor knows no workload and no instrument, and links no NATS (it runs the log node as an app)", supervisor, slices.Concat(workloads, instruments, fleetLog, nats), true},
		{"the feed knows no log (feed.Options.Log is its interface): a single host runs without one", []string{"internal/feed"}, slices.Concat(fleetLog, nats), true},
		{"the log knows no supervisor package above ipc, no workload and no instrument", fleetLog, slices.Concat(supAbove, []string{"internal/cluster"}, workloads, instruments), true},
		{"the engine knows neither the supervisor above it, nor a workload, nor an instrument", engine, append(append(slices.Clone(supAbove), workloads...), instruments...), true},
		{"the workers know the supervisor only through ipc", workers, append(append(slices.Clone(supAbove), "internal/cluster", "internal/subreaper", "internal/agent"), instruments...), true},
		{"the leaves import nothing of the project", leaves, []string{"internal", "cmd", "configs", "bench"}, false},
	}
	for _, r := range rules {
		for path, p := range g {
			if !under(path, r.from) || strings.HasSuffix(path, "test") { // a test-support package is its tests'
				continue
			}
			list := p.Imports
			if r.deps {
				list = p.Deps
			}
			for _, d := range list {
				if under(d, r.never) {
					t.Errorf("%s: %s imports %s", r.name, path, d)
				}
			}
		}
	}
	for path, p := range g {
		for _, d := range p.Imports {
			if strings.HasPrefix(d, "cmd/") && !(path == "cmd/supervisor" && d == "cmd/supervisor/cli") {
				t.Errorf("%s imports the command package %s: a command's code is its own", path, d)
			}
		}
	}
}

// TestShippedBinaries: the binaries that run in production link no package testing and no
// instrument.
func TestShippedBinaries(t *testing.T) {
	g := graph(t)
	for _, bin := range shipped {
		p, ok := g[bin]
		if !ok {
			t.Errorf("%s: not in the module", bin)
			continue
		}
		for _, d := range p.Deps { // what go list -deps lists for it
			if d == "testing" || under(d, instruments) {
				t.Errorf("%s links %s", bin, d)
			}
		}
	}
}

// TestEveryPackageHasAFloor: a new package is placed on a floor (the lists above), so the
// rules see it.
func TestEveryPackageHasAFloor(t *testing.T) {
	all := slices.Concat(supervisor, engine, workers, instruments, fleetLog, leaves, others)
	for path := range graph(t) {
		if !under(path, all) {
			t.Errorf("%s is on no floor: add it to one of floors_test.go's lists", path)
		}
	}
}
