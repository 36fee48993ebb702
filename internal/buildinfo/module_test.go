package buildinfo

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleRequiresWhatShips: every module go.mod requires directly is imported by one of
// the product's packages (cmd/, internal/, bench/autocannon) or their tests. Experiments
// whose decisions are made live in bench/experiments, a module of their own, so a user of
// this module never resolves the event-loop libraries they compared.
func TestModuleRequiresWhatShips(t *testing.T) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))

	edit := exec.Command("go", "mod", "edit", "-json")
	edit.Dir = root
	out, err := edit.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatalf("read go mod edit -json: %v", err)
	}

	list := exec.Command("go", "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}",
		"./cmd/...", "./internal/...", "./bench/autocannon")
	list.Dir = root
	out, err = list.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	used := map[string]bool{}
	for _, line := range strings.Fields(string(out)) {
		used[line] = true
	}

	for _, r := range mod.Require {
		if !r.Indirect && !used[r.Path] {
			t.Errorf("go.mod requires %s, which no product package imports: move the code that needs it to bench/experiments (its own module), then go mod tidy", r.Path)
		}
	}
}
