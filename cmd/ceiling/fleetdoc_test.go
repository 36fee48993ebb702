package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFleetDocCommands runs the `bin/ceiling fleet-config` commands of docs/fleet.md (the
// by-hand host side), so that the doc's commands stay ones that work: each renders, and
// is checked by its balancer where the command says -check (its -o into a test directory).
func TestFleetDocCommands(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	// A command and its continuation lines (ending in a backslash).
	re := regexp.MustCompile(`bin/ceiling fleet-config((?:[^\n]*\\\n)*[^\n]*)`)
	cmds := re.FindAllStringSubmatch(string(doc), -1)
	if len(cmds) < 2 {
		t.Fatalf("docs/fleet.md has %d fleet-config commands, want HAProxy's and nft's at least", len(cmds))
	}
	for i, m := range cmds {
		line := strings.ReplaceAll(m[1], "\\\n", " ")
		line, _, _ = strings.Cut(line, "#") // a comment after the command
		line, _, _ = strings.Cut(line, ">") // a redirection
		args := strings.Fields(line)
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			for j := range args {
				if args[j] == "-check" {
					if slices.Contains(args, "nft") {
						needNft(t)
					} else {
						needHAProxy(t)
					}
				}
				if args[j] == "-o" && j+1 < len(args) {
					args[j+1] = filepath.Join(t.TempDir(), filepath.Base(args[j+1]))
				}
			}
			if _, err := runFleetConfigOut(t, args...); err != nil {
				t.Errorf("docs/fleet.md: bin/ceiling fleet-config %s: %v", strings.Join(args, " "), err)
			}
		})
	}
}
