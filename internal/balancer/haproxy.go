package balancer

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/agent"
)

// Defaults of HAProxyParams.
const (
	DefaultListen     = "127.0.0.1:8080"
	DefaultAgentPort  = agent.DefaultPort
	DefaultInter      = 2 * time.Second
	DefaultHealthPath = "/health"
	DefaultBufSize    = 64 << 10
	DefaultRetries    = 3
	// DefaultServerTimeout is `timeout server`: how long a request sent to a host may go
	// unanswered (a host whose link is down) before HAProxy gives up on that host.
	DefaultServerTimeout = 30 * time.Second
	DefaultStatsSocket   = "/run/haproxy/onehost-admin.sock"
	DefaultStateFile     = "/var/lib/haproxy/onehost-server-state"
	// DefaultUser and DefaultGroup are the account HAProxy's workers drop to, and
	// DefaultChroot the directory they are locked in: what Debian's haproxy package creates.
	DefaultUser   = "haproxy"
	DefaultGroup  = "haproxy"
	DefaultChroot = "/var/lib/haproxy"
)

// Server is one host behind the balancer.
type Server struct {
	// Name is the server's name in the backend "hosts" (what `set server hosts/NAME` and
	// show stat use). Default "hI" for the I-th server.
	Name string
	// Addr is the host's HOST:PORT that serves HTTP (its supervisor's listener).
	Addr string
	// AgentAddr and AgentPort override where this host's agent answers. Default: the
	// host's own address, HAProxyParams.AgentPort.
	AgentAddr string
	AgentPort int
}

// HAProxyParams fill configs/haproxy/haproxy.cfg. The zero value, plus Servers, works.
type HAProxyParams struct {
	// Listen is the frontend's bind address (@LISTEN@). Default DefaultListen.
	Listen string
	// Servers are the hosts (@SERVERS@); at least one.
	Servers []Server
	// Balance is "roundrobin" (default) or "leastconn".
	Balance string
	// AgentPort is the port every host's agent answers on (@AGENT_PORT@). Default
	// DefaultAgentPort.
	AgentPort int
	// CheckInter and AgentInter are the intervals of the HTTP check and of the agent check.
	// Default DefaultInter each.
	CheckInter, AgentInter time.Duration
	// HealthPath is the worker's health URL (@HEALTH_PATH@). Default "/health".
	HealthPath string
	// BufSize is tune.bufsize. Default 64 KB: the largest request the worker accepts (16 KB
	// head, 16 KB body) fits one buffer, so it can be retried.
	BufSize int
	// Retries is `retries`. Default 3.
	Retries int
	// ServerTimeout is `timeout server` (whole milliseconds). Default DefaultServerTimeout.
	// A replayable request still unanswered after it is sent again to another host
	// (retry-on response-timeout); tests shorten it to stand for a long outage in seconds.
	ServerTimeout time.Duration
	// MaxConn is the global maxconn. 0: HAProxy's default, what its descriptor limit
	// allows (about half of it: each proxied connection holds two descriptors).
	MaxConn int
	// Threads is nbthread. 0: HAProxy's default, one thread per CPU it may run on.
	Threads int
	// StatsSocket and StateFile are absolute paths of the admin socket and the server-state
	// file. Default DefaultStatsSocket, DefaultStateFile.
	StatsSocket, StateFile string
	// StatsGroup is the operator group whose members may use the stats socket (admin level:
	// they control the balancer): the socket is then root's and that group's, mode 660.
	// Default "": root's alone, mode 600.
	StatsGroup string
	// User and Group are the account the workers run as once the master has opened what
	// they need (`user`, `group`), and Chroot the directory they are locked in (`chroot`):
	// default DefaultUser, DefaultGroup, DefaultChroot.
	User, Group, Chroot string
	// KeepPrivileges leaves user, group and chroot out: the workers keep the uid HAProxy
	// was started with. Only for an HAProxy started by a non-root user, which can neither
	// change its uid nor chroot (StartHAProxy sets it then); a production rendering never.
	KeepPrivileges bool
}

// RenderHAProxy fills tmpl (configs/haproxy/haproxy.cfg) from p. A wrong value is an error
// naming the field.
func RenderHAProxy(tmpl []byte, p HAProxyParams) ([]byte, error) {
	const what = "render haproxy config"
	balance := cmp.Or(p.Balance, "roundrobin")
	if balance != "roundrobin" && balance != "leastconn" {
		return nil, fmt.Errorf("%s: Balance %q: want roundrobin or leastconn", what, p.Balance)
	}
	if len(p.Servers) == 0 {
		return nil, fmt.Errorf("%s: no Servers: name at least one host's HOST:PORT", what)
	}
	var servers strings.Builder
	seen := map[string]bool{}
	for i, s := range p.Servers {
		name := cmp.Or(s.Name, "h"+strconv.Itoa(i))
		if !ValidName(name) {
			return nil, fmt.Errorf("%s: Servers[%d].Name %q: use letters, digits, '-', '_' and '.'", what, i, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: Servers[%d].Name %q is used twice", what, i, name)
		}
		seen[name] = true
		if _, _, err := net.SplitHostPort(s.Addr); err != nil {
			return nil, fmt.Errorf("%s: Servers[%d].Addr %q: want HOST:PORT", what, i, s.Addr)
		}
		fmt.Fprintf(&servers, "    server %s %s", name, s.Addr)
		if s.AgentAddr != "" {
			fmt.Fprintf(&servers, " agent-addr %s", s.AgentAddr)
		}
		if s.AgentPort > 0 {
			fmt.Fprintf(&servers, " agent-port %d", s.AgentPort)
		}
		servers.WriteByte('\n')
	}
	maxconn := "    # maxconn: HAProxy's default, from its descriptor limit (ulimit -n)"
	if p.MaxConn > 0 {
		maxconn = "    maxconn " + strconv.Itoa(p.MaxConn)
	}
	nbthread := "    # nbthread: HAProxy's default, one thread per CPU it may run on"
	if p.Threads > 0 {
		nbthread = "    nbthread " + strconv.Itoa(p.Threads)
	}
	sock, state := cmp.Or(p.StatsSocket, DefaultStatsSocket), cmp.Or(p.StateFile, DefaultStateFile)
	paths := map[string]string{"StatsSocket": sock, "StateFile": state}
	privileges := "    # user, group, chroot: left out (KeepPrivileges), the workers keep the uid that started HAProxy"
	if !p.KeepPrivileges {
		user, group, chroot := cmp.Or(p.User, DefaultUser), cmp.Or(p.Group, DefaultGroup), cmp.Or(p.Chroot, DefaultChroot)
		for field, name := range map[string]string{"User": user, "Group": group} {
			if !ValidName(name) {
				return nil, fmt.Errorf("%s: %s %q: use letters, digits, '-', '_' and '.'", what, field, name)
			}
		}
		paths["Chroot"] = chroot
		privileges = "    user " + user + "\n    group " + group + "\n    chroot " + chroot
	}
	for field, path := range paths {
		if !filepath.IsAbs(path) {
			return nil, fmt.Errorf("%s: %s %q is not absolute (HAProxy would resolve it against its working directory)", what, field, path)
		}
		if strings.ContainsFunc(path, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '#' || r == '"' || r == '\'' || r == '\\' }) {
			return nil, fmt.Errorf("%s: %s %q: a space, quote, '#' or control character would end or change the line; choose another path", what, field, path)
		}
	}
	access := "mode 600"
	if p.StatsGroup != "" {
		if !ValidName(p.StatsGroup) {
			return nil, fmt.Errorf("%s: StatsGroup %q: use letters, digits, '-', '_' and '.'", what, p.StatsGroup)
		}
		access = "mode 660 user root group " + p.StatsGroup
	}
	return render(what, tmpl, map[string]string{
		"@LISTEN@":         cmp.Or(p.Listen, DefaultListen),
		"@SERVERS@":        strings.TrimSuffix(servers.String(), "\n"),
		"@BALANCE@":        balance,
		"@AGENT_PORT@":     strconv.Itoa(orInt(p.AgentPort, DefaultAgentPort)),
		"@CHECK_INTER@":    ms(p.CheckInter),
		"@AGENT_INTER@":    ms(p.AgentInter),
		"@HEALTH_PATH@":    cmp.Or(p.HealthPath, DefaultHealthPath),
		"@BUFSIZE@":        strconv.Itoa(orInt(p.BufSize, DefaultBufSize)),
		"@RETRIES@":        strconv.Itoa(orInt(p.Retries, DefaultRetries)),
		"@TIMEOUT_SERVER@": msOr(p.ServerTimeout, DefaultServerTimeout),
		"@MAXCONN@":        maxconn,
		"@NBTHREAD@":       nbthread,
		"@STATS_SOCKET@":   sock,
		"@STATS_ACCESS@":   access,
		"@PRIVILEGES@":     privileges,
		"@STATE_FILE@":     state,
	})
}

// ValidName says whether s is a name HAProxy takes for a server (or a group): letters,
// digits, '-', '_' and '.', at least one.
func ValidName(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return s != ""
}

// ms renders an interval in HAProxy's units: whole milliseconds, DefaultInter when d <= 0.
func ms(d time.Duration) string { return msOr(d, DefaultInter) }

// msOr renders d in whole milliseconds, def when d <= 0.
func msOr(d, def time.Duration) string {
	if d <= 0 {
		d = def
	}
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

func orInt(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// CheckHAProxy runs `haproxy -c -f path` (bin "" for LookHAProxy) and returns its
// complaint as the error.
func CheckHAProxy(ctx context.Context, bin, path string) error {
	if bin == "" {
		var err error
		if bin, err = LookHAProxy(); err != nil {
			return err
		}
	}
	out, err := exec.CommandContext(ctx, bin, "-c", "-f", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("check haproxy config %s: %w: %s", path, err, bytes.TrimSpace(out))
	}
	return nil
}

// HAProxyOptions configure StartHAProxy.
type HAProxyOptions struct {
	// Binary is the haproxy executable. Default: LookHAProxy.
	Binary string
	// Dir is the private directory for haproxy.cfg, the pid file, the stats socket and the
	// server-state file (Params' StatsSocket and StateFile are set there). Required.
	Dir string
	// Params fill the template. Listen must be set (the address the caller will use).
	// Run by root, the workers drop to Params' User and Group in its Chroot, as in
	// production; run by another user, which cannot, StartHAProxy sets KeepPrivileges.
	Params HAProxyParams
	// Stderr receives HAProxy's messages (nil: discarded).
	Stderr io.Writer
	// Wrap rewrites HAProxy's command line, e.g. to run it in a network namespace or pinned
	// (nsenter, taskset); the wrapper must exec haproxy so that the pid stays the master's.
	Wrap func(argv []string) []string
	// StartTimeout bounds the wait for the stats socket. Default 10 s.
	StartTimeout time.Duration
}

// HAProxy is a running HAProxy in master-worker mode (-W), in the foreground: the master is
// this process's child; a reload (SIGUSR2) makes it start new workers on the new file.
type HAProxy struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	tmpl    []byte
	opt     HAProxyOptions
	conf    string
}

// StartHAProxy renders tmpl into Dir/haproxy.cfg, checks it, runs HAProxy on it and returns
// once the runtime API answers. The caller must call Stop.
func StartHAProxy(ctx context.Context, tmpl []byte, opt HAProxyOptions) (*HAProxy, error) {
	if opt.Dir == "" || !filepath.IsAbs(opt.Dir) {
		return nil, fmt.Errorf("start haproxy: Dir %q: want an absolute directory of its own", opt.Dir)
	}
	if opt.Params.Listen == "" {
		return nil, fmt.Errorf("start haproxy: Params.Listen is empty: give the HOST:PORT it should bind")
	}
	if opt.Binary == "" {
		var err error
		if opt.Binary, err = LookHAProxy(); err != nil {
			return nil, err
		}
	}
	opt.Params.StatsSocket = filepath.Join(opt.Dir, "admin.sock")
	opt.Params.StateFile = filepath.Join(opt.Dir, "server-state")
	if os.Geteuid() != 0 {
		opt.Params.KeepPrivileges = true
	}
	if !opt.Params.KeepPrivileges {
		// HAProxy's own complaint comes only from the forked worker, as its exit.
		chroot := cmp.Or(opt.Params.Chroot, DefaultChroot)
		if fi, err := os.Stat(chroot); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("start haproxy: Params.Chroot %q is not a directory: install Debian's haproxy package (it creates %s) or name another", chroot, DefaultChroot)
		}
	}
	h := &HAProxy{tmpl: tmpl, opt: opt, conf: filepath.Join(opt.Dir, "haproxy.cfg"), done: make(chan struct{})}
	if err := h.writeConfig(ctx); err != nil {
		return nil, err
	}
	// No states to load yet; an empty file spares HAProxy's warning that there is none.
	if err := os.WriteFile(opt.Params.StateFile, []byte("1\n"), 0o600); err != nil {
		return nil, fmt.Errorf("start haproxy: %w", err)
	}
	argv := []string{opt.Binary, "-W", "-db", "-f", h.conf, "-p", filepath.Join(opt.Dir, "haproxy.pid")}
	if opt.Wrap != nil {
		argv = opt.Wrap(argv)
	}
	h.cmd = exec.Command(argv[0], argv[1:]...)
	h.cmd.Dir = opt.Dir
	h.cmd.Stdout, h.cmd.Stderr = opt.Stderr, opt.Stderr
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start haproxy: %w", err)
	}
	go func() {
		h.waitErr = h.cmd.Wait()
		close(h.done)
	}()
	if _, err := h.waitWorker(ctx, 0); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

func (h *HAProxy) writeConfig(ctx context.Context) error {
	conf, err := RenderHAProxy(h.tmpl, h.opt.Params)
	if err != nil {
		return err
	}
	if err := os.WriteFile(h.conf, conf, 0o600); err != nil {
		return fmt.Errorf("write haproxy config: %w", err)
	}
	return CheckHAProxy(ctx, h.opt.Binary, h.conf)
}

// waitWorker waits until the runtime API answers from a worker whose pid is not old.
func (h *HAProxy) waitWorker(ctx context.Context, old int) (int, error) {
	timeout := h.opt.StartTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-h.done:
			return 0, fmt.Errorf("haproxy exited (%v); its messages went to HAProxyOptions.Stderr", h.waitErr)
		case <-ctx.Done():
			return 0, ctx.Err()
		default:
		}
		if pid, err := h.workerPid(); err == nil && pid != old {
			return pid, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("haproxy's runtime API not answering from a new worker after %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *HAProxy) workerPid() (int, error) {
	out, err := h.Command("show info")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, "Pid: "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("show info: no Pid line")
}

// Pid is the master process's pid.
func (h *HAProxy) Pid() int { return h.cmd.Process.Pid }

// Dir is the private directory (haproxy.cfg, admin.sock, server-state, haproxy.pid).
func (h *HAProxy) Dir() string { return h.opt.Dir }

// Reload renders the template again with p (servers added or removed, say), saves the
// servers' runtime states to the state file, and has the master start new workers on the
// new file (SIGUSR2); the old ones finish their connections. It returns once the new
// worker answers. A server drained before the reload is drained after it.
func (h *HAProxy) Reload(ctx context.Context, p HAProxyParams) error {
	p.StatsSocket, p.StateFile = h.opt.Params.StatsSocket, h.opt.Params.StateFile
	h.opt.Params = p
	if err := h.writeConfig(ctx); err != nil {
		return err
	}
	state, err := h.Command("show servers state")
	if err != nil {
		return fmt.Errorf("reload haproxy: save server states: %w", err)
	}
	tmp := p.StateFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(state), 0o600); err != nil {
		return fmt.Errorf("reload haproxy: save server states: %w", err)
	}
	if err := os.Rename(tmp, p.StateFile); err != nil {
		return fmt.Errorf("reload haproxy: save server states: %w", err)
	}
	old, err := h.workerPid()
	if err != nil {
		return fmt.Errorf("reload haproxy: %w", err)
	}
	if err := h.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return fmt.Errorf("reload haproxy: %w", err)
	}
	if _, err := h.waitWorker(ctx, old); err != nil {
		return fmt.Errorf("reload haproxy: %w", err)
	}
	return nil
}

// Command sends one runtime-API command on the stats socket and returns the answer.
func (h *HAProxy) Command(cmd string) (string, error) {
	c, err := net.DialTimeout("unix", h.opt.Params.StatsSocket, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("dial haproxy stats socket: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", fmt.Errorf("send %q to haproxy: %w", cmd, err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", fmt.Errorf("read haproxy's answer to %q: %w", cmd, err)
	}
	return string(b), nil
}

// SetState sets a server's administrative state through the runtime API: "ready",
// "drain" or "maint".
func (h *HAProxy) SetState(server, state string) error {
	switch state {
	case "ready", "drain", "maint":
	default:
		return fmt.Errorf("set server state: %q: want ready, drain or maint", state)
	}
	out, err := h.Command("set server hosts/" + server + " state " + state)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(out); s != "" {
		return fmt.Errorf("set server hosts/%s state %s: %s", server, state, s)
	}
	return nil
}

// ServerStat is one server's row of show stat.
type ServerStat struct {
	Name   string
	Status string // "UP", "DOWN", "DRAIN", "MAINT", "UP 1/2" …
	Weight int
	Scur   int   // current sessions
	Stot   int64 // sessions since start
	Retr   int64 // retries
	Redis  int64 // redispatches
	// AgentStatus is the agent check's last result (show stat's agent_status: "L7OK" when
	// the agent answered); "" where no agent check runs or the column is absent.
	AgentStatus string
}

// Stat returns the backend's servers from show stat.
func (h *HAProxy) Stat() ([]ServerStat, error) {
	out, err := h.Command("show stat")
	if err != nil {
		return nil, err
	}
	return ParseStat(out)
}

// ParseStat reads show stat's CSV (its header line starts with "# ") and returns the rows
// of the backend "hosts" that are servers.
func ParseStat(out string) ([]ServerStat, error) {
	r := csv.NewReader(bufio.NewReader(strings.NewReader(strings.TrimPrefix(out, "# "))))
	r.FieldsPerRecord = -1
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("read show stat: %w", err)
	}
	col := map[string]int{}
	for i, n := range head {
		col[n] = i
	}
	for _, n := range []string{"pxname", "svname", "scur", "stot", "status", "weight", "wretr", "wredis"} {
		if _, ok := col[n]; !ok {
			return nil, fmt.Errorf("read show stat: no column %s", n)
		}
	}
	var stats []ServerStat
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return stats, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read show stat: %w", err)
		}
		get := func(n string) string {
			if i, ok := col[n]; ok && i < len(rec) { // absent column (agent_status): ""
				return rec[i]
			}
			return ""
		}
		if get("pxname") != "hosts" || get("svname") == "BACKEND" || get("svname") == "FRONTEND" {
			continue
		}
		num := func(n string) int64 { v, _ := strconv.ParseInt(get(n), 10, 64); return v }
		stats = append(stats, ServerStat{
			Name: get("svname"), Status: get("status"), Weight: int(num("weight")),
			Scur: int(num("scur")), Stot: num("stot"), Retr: num("wretr"), Redis: num("wredis"),
			AgentStatus: strings.TrimSpace(get("agent_status")),
		})
	}
}

// Stop asks HAProxy to stop (SIGTERM to the master, which stops its workers), waits for it,
// and kills it after 10 s. Calling it again returns the same.
func (h *HAProxy) Stop() error {
	select {
	case <-h.done:
	default:
		h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			h.cmd.Process.Kill()
			<-h.done
		}
	}
	if h.waitErr != nil {
		// The master exits with the status of its last worker: 143 after SIGTERM is a stop.
		// So is the master dying of the SIGTERM itself: just after a reload it re-executes
		// itself and has no handler yet for a moment.
		if ee, ok := h.waitErr.(*exec.ExitError); ok {
			ws, _ := ee.Sys().(syscall.WaitStatus)
			if ee.ExitCode() == 143 || ee.ExitCode() == 130 || ws.Signaled() && ws.Signal() == syscall.SIGTERM {
				return nil
			}
		}
		return fmt.Errorf("haproxy exit: %w", h.waitErr)
	}
	return nil
}
