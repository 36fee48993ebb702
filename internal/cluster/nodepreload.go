package cluster

import (
	_ "embed"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// An unmodified Node app calls listen(PORT), as in PM2's cluster mode, where Node's cluster
// module shares the primary's handle. Here the slot's socket is at fd 3, and the preload
// the supervisor ships (nodepreload/preload.cjs, which says how) turns the app's listen for
// the served port into listen({fd: 3}). It is written once per supervisor, beside the
// workers' sd_notify sockets, and reaches every Node worker through NODE_OPTIONS.

//go:embed nodepreload/preload.cjs
var nodePreload []byte

// Environment of the preload.
const (
	envNodePort    = "ONEHOST_NODE_PORT"    // the served port
	envNodePreload = "ONEHOST_NODE_PRELOAD" // "0" in the app's environment turns it off
	// envNodeWorkerPID is the preload's claim on fd 3 (the first process that loads it),
	// which processes the worker starts inherit; never passed in from our own environment.
	envNodeWorkerPID = "ONEHOST_NODE_WORKER_PID"
	preloadName      = "onehost-preload.cjs"
)

// nodeEnv returns the variables a Node worker of slot gets on top of env (loop only): the
// preload in NODE_OPTIONS (after the user's own options), the served port, and PORT when
// the user's environment does not set it, so that listen(process.env.PORT) asks for the
// port served; NODE_APP_INSTANCE and pm_id as PM2 sets them. No preload when the workers
// bind their own sockets (self_bind) or serve no port, when the environment says ONEHOST_NODE_PRELOAD=0, or
// when it cannot be written (logged once); preloaded says whether it is there.
func (s *Supervisor) nodeEnv(env []string, slot int) (add []string, preloaded bool) {
	iv := s.cfg.InstanceVar // PM2's instance_var renames it
	if iv == "" {
		iv = "NODE_APP_INSTANCE"
	}
	if _, ok := lookupEnv(env, iv); !ok {
		add = append(add, iv+"="+strconv.Itoa(slot))
	}
	if _, ok := lookupEnv(env, "pm_id"); !ok {
		add = append(add, "pm_id="+strconv.Itoa(slot))
	}
	_, port, _ := net.SplitHostPort(s.addr)
	if v, _ := lookupEnv(env, envNodePreload); s.ownSockets() || v == "0" || port == "" || port == "0" {
		return add, false
	}
	path, err := s.preloadPath()
	if err != nil {
		if !s.preloadFailed {
			s.preloadFailed = true
			s.log.Error("no Node preload: a Node app's listen(PORT) will not serve the slot's socket", zap.Error(err))
		}
		return add, false
	}
	add = append(add, envNodePort+"="+port,
		envNodeGrace+"="+strconv.FormatInt(nodeIdleGrace(s.cfg.KillTimeout.D()).Milliseconds(), 10),
		envNodeStats+"="+strconv.FormatInt(s.cfg.StatsInterval.D().Milliseconds(), 10))
	if _, ok := lookupEnv(env, "PORT"); !ok {
		add = append(add, "PORT="+port)
	}
	opt := "--require " + nodeQuote(path)
	if user, ok := lookupEnv(env, "NODE_OPTIONS"); ok && strings.TrimSpace(user) != "" {
		opt = user + " " + opt
	}
	return append(add, "NODE_OPTIONS="+opt), true
}

// preloadPath writes the preload once and returns its path (loop only).
func (s *Supervisor) preloadPath() (string, error) {
	if s.preload != "" {
		return s.preload, nil
	}
	dir := s.notifyDir
	if dir == "" {
		return "", fmt.Errorf("write node preload: no runtime directory")
	}
	path := filepath.Join(dir, preloadName)
	if err := os.WriteFile(path, nodePreload, 0o444); err != nil {
		return "", fmt.Errorf("write node preload: %w", err)
	}
	s.preload = path
	return path, nil
}

// nodeQuote quotes a path for NODE_OPTIONS, which splits on spaces and honours double quotes
// with backslash escapes.
func nodeQuote(p string) string {
	if !strings.ContainsAny(p, " \t\"\\") {
		return p
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(p) + `"`
}

// lookupEnv returns the last value of key in env (the one a program sees).
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
