package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// evalJSTimeout bounds how long node may take to load an ecosystem file: PM2 requires the
// file once at start, and a file that hangs (a top-level await on the network) must not
// hang the supervisor's start with it.
const evalJSTimeout = 30 * time.Second

// evalJS is the script node runs to turn an ecosystem file into JSON, as PM2 does by
// requiring it: require() for CommonJS (.js, .cjs), import() for ES modules (.mjs, or a .js
// that require() refuses as ESM); JSON.stringify drops functions and undefined as PM2's
// own serialisation of the app list does. The path comes as argv[1], never inside the
// script, so no quoting of it matters.
const evalJS = `const p = process.argv[1];
const out = (m) => { if (m && !m.apps && m.default) m = m.default; process.stdout.write(JSON.stringify(m === undefined ? null : m)); };
const fail = (e) => { console.error(String((e && e.stack) || e)); process.exit(1); };
const esm = () => import(require('url').pathToFileURL(p).href).then(out, fail);
let m, isESM = p.endsWith('.mjs');
if (!isESM) {
  try { m = require(p); } catch (e) {
    if (!e || (e.code !== 'ERR_REQUIRE_ESM' && e.code !== 'ERR_REQUIRE_ASYNC_MODULE')) fail(e);
    isESM = true;
  }
}
if (isESM) esm(); else out(m);`

// nodeMissingError is what a JavaScript ecosystem file gets when no node is on PATH: it
// says so, and how to convert the file once elsewhere.
func nodeMissingError(path string) error {
	js := strings.TrimSuffix(path, filepath.Ext(path)) + ".json"
	return fmt.Errorf("ecosystem %s: a JavaScript file is evaluated with node, and no node is on PATH: install Node.js (Debian: apt-get install nodejs), or write it out as JSON once where node is, with:\n"+
		"  node -e 'console.log(JSON.stringify(require(%q), null, 2))' > %s\n"+
		"then run the JSON, which has the same fields ({\"apps\": [{\"name\": ..., \"script\": ..., \"instances\": ...}]}):\n"+
		"  supervisor run -config %s", path, mustAbs(path), js, js)
}

// loadJSEcosystem evaluates a .config.js / .cjs / .mjs file with the node found on PATH
// (lookPath, so tests can give a PATH without one) and returns the JSON of its exports.
func loadJSEcosystem(path string, lookPath func(string) (string, error)) ([]byte, error) {
	node, err := lookPath("node")
	if err != nil {
		return nil, nodeMissingError(path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), evalJSTimeout)
	defer cancel()
	// -e with the path as an argument: `node -e SCRIPT PATH` gives process.argv[1] = PATH.
	cmd := exec.CommandContext(ctx, node, "-e", evalJS, mustAbs(path))
	cmd.Dir = filepath.Dir(mustAbs(path)) // relative requires inside resolve as under PM2
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ctx.Err() != nil {
			msg = fmt.Sprintf("node did not finish within %s", evalJSTimeout)
		}
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("ecosystem %s: evaluate with node: %s", path, msg)
	}
	b := bytes.TrimSpace(stdout.Bytes())
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil, errors.New("ecosystem " + path + ": the file exports nothing: want module.exports = { apps: [...] }")
	}
	return b, nil
}
