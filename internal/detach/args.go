package detach

// start's arguments, PM2's way: `pm2 start app.js -i 2 --name api` (or `start -i 2 app.js`)
// becomes `supervisor run`'s flags and command.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DefaultFile is the file `start` (and `startup`) without one runs: the first of
// DefaultStartFiles here that is a regular file.
func DefaultFile() (string, bool) {
	i := slices.IndexFunc(DefaultStartFiles, func(p string) bool { fi, err := os.Stat(p); return err == nil && fi.Mode().IsRegular() })
	if i < 0 {
		return "", false
	}
	return DefaultStartFiles[i], true
}

// RunArgs are the `supervisor run` arguments of `start FILE|SCRIPT REST` (a configuration
// file, a Node script, a Python one or an executable), with PORT of the calling
// environment served for a Node script (listenFromPORT); note is what to tell the user of
// that, or "".
func RunArgs(target string, rest []string, getenv func(string) string) (runArgs []string, note string, err error) {
	runArgs, err = startArgs(target, rest)
	if err != nil {
		return nil, "", err
	}
	return listenFromPORT(runArgs, getenv)
}

// DefaultStartFiles are what `start` without a file looks for, in order: PM2's names,
// then run's default configuration.
var DefaultStartFiles = []string{"ecosystem.config.js", "ecosystem.config.cjs", "ecosystem.config.json", "ecosystem.json",
	"ecosystem.config.yaml", "ecosystem.yaml", DefaultConfig}

// isEcosystemName reports whether a .js file is PM2's ecosystem file rather than an app's
// script, by PM2's own rule: its name says ecosystem or .config.
func isEcosystemName(path string) bool {
	base := filepath.Base(path)
	return strings.HasPrefix(base, "ecosystem") || strings.Contains(base, ".config.")
}

// startArgs are the `run` arguments for `start FILE|SCRIPT REST`.
func startArgs(target string, rest []string) ([]string, error) {
	abs, err := filepath.Abs(target)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	flags, extra := rest, []string(nil)
	if i := slices.Index(rest, "--"); i >= 0 {
		flags, extra = rest[:i], rest[i+1:]
	}
	out := slices.Clone(flags)
	for i, f := range out {
		switch f {
		case "-i", "--instances": // pm2 start app.js -i max
			out[i] = "-instances"
		case "-n", "--name": // pm2 start app.js --name api
			out[i] = "-name"
		}
	}
	ext := filepath.Ext(abs)
	switch {
	case (ext == ".js" || ext == ".cjs" || ext == ".mjs") && !isEcosystemName(abs):
		out = append(out, "--", "node", abs)
	case ext == ".js" || ext == ".cjs" || ext == ".mjs" || ext == ".json" || ext == ".yaml" || ext == ".yml":
		if len(extra) > 0 {
			return nil, fmt.Errorf("start: arguments after -- go to a script, and %s is a configuration", target)
		}
		return append(out, "-config", abs), nil
	case ext == ".py":
		out = append(out, "--", "python3", abs)
	default:
		fi, err := os.Stat(abs)
		if err != nil || fi.Mode().Perm()&0o111 == 0 {
			return nil, fmt.Errorf("start: %s is neither a configuration (.yaml, .json, ecosystem.config.js), a .js or .py script, nor executable (chmod +x %s)", target, target)
		}
		out = append(out, "--", abs)
	}
	return append(out, extra...), nil
}

// runValueless are run's flags that take no value: FileFirst must not take the word after
// them for theirs.
var runValueless = []string{"check", "share-port"}

// FileFirst moves the first argument that is not a flag nor a flag's value to the front:
// pm2 takes `start -i 2 app.js` as `start app.js -i 2`.
func FileFirst(args []string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return args
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if i == 0 {
				return args
			}
			return append(append([]string{a}, args[:i]...), args[i+1:]...)
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && !slices.Contains(runValueless, name) && !slices.Contains([]string{"h", "help"}, name) {
			i++ // its value
		}
	}
	return args
}

// listenFromPORT gives a Node script started without -listen the port PORT names in the
// calling environment, as a PM2 user expects of `PORT=3100 pm2 start app.js`: the app's
// listen(process.env.PORT) asks for it, and the supervisor then serves it on every
// interface, as the app's own listen(PORT) binds (an ecosystem file's env.PORT is served
// so too). It returns the arguments and what to tell the user ("" when nothing changed).
// A configuration file names its own address; other programs read PORT their own way.
func listenFromPORT(runArgs []string, getenv func(string) string) ([]string, string, error) {
	port := getenv("PORT")
	i := slices.Index(runArgs, "--")
	if port == "" || i < 0 || i+1 >= len(runArgs) || runArgs[i+1] != "node" {
		return runArgs, "", nil
	}
	if _, ok := FlagValue(runArgs, "listen"); ok {
		return runArgs, "", nil // the user's choice (the app's listen(PORT) is served too: an app port)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, "", fmt.Errorf("start: PORT=%q in the environment is not a port (1 to 65535): unset it, or give -listen HOST:PORT", port)
	}
	listen := "0.0.0.0:" + port
	out := append(slices.Clone(runArgs[:i]), "-listen", listen)
	return append(out, runArgs[i:]...), "PORT=" + port + " in the environment: serving " + listen +
		", the port the app's listen(process.env.PORT) asks for, on every interface as its own listen would bind (-listen HOST:PORT chooses another)", nil
}
