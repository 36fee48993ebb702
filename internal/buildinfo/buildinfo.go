// Package buildinfo says which build a binary is: its module version and the VCS
// revision it was built from, as Go records them (runtime/debug.ReadBuildInfo), for every
// command's --version.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// IsVersionArg reports whether arg asks a command for its version: --version, -version or
// the word version (not -v, which is verbose to many tools).
func IsVersionArg(arg string) bool {
	return arg == "--version" || arg == "-version" || arg == "version"
}

// String is the one line --version prints for the program name: its module and version
// ("(devel)" for a build from a checkout), the revision and whether the tree was modified,
// and the Go version. A field the build did not record (go build -buildvcs=false, as the
// Makefile's GOFLAGS may say) reads unknown.
func String(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information: built without module support)"
	}
	return format(name, bi)
}

func format(name string, bi *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	rev := settings["vcs.revision"]
	switch {
	case rev == "":
		rev = "revision unknown (built without VCS stamping)"
	default:
		if len(rev) > 12 {
			rev = rev[:12]
		}
		rev = "revision " + rev
		if t := settings["vcs.time"]; t != "" {
			rev += " (" + t + ")"
		}
		if settings["vcs.modified"] == "true" {
			rev += ", modified"
		}
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s %s, %s, %s", name, bi.Main.Path, version, rev, bi.GoVersion))
}
