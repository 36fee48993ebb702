// Package loadhosts runs a load generator on other hosts over ssh, the way Vegeta and
// wrk2 users distribute load: no agent beyond the generator's binary, copied over with
// scp when the remote copy is missing or differs, started with ssh, its result files
// copied back. Cancelling the context stops the remote process (a kill over a second
// ssh connection: the remote command records its pid first), so no generator is left
// running on a host after the run.
//
// It builds ssh and scp command lines and runs them; it knows nothing of what the
// generator does (internal/journey's user ranges and start times are the caller's).
//
// What it trusts: the hosts' names come from a flag, so each is checked to be a plain
// user@host (a leading "-" would be an ssh option: -oProxyCommand=... runs a command here),
// and "--" ends the options of every ssh and scp command before the host. On the host, the
// directory the binary and the pid files live in must be the ssh user's own, not a link
// (another user could have made /tmp/onehost-load first and swap the binary), and a pid read
// back is killed only if it is a plain number above 1 (kill -TERM -1 signals every process
// of the user).
package loadhosts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Host is one load host: user@addr[:port].
type Host struct {
	User string
	Addr string
	Port int // 0: ssh's default (or the ssh config's)
}

func (h Host) String() string {
	s := h.Addr
	if h.User != "" {
		s = h.User + "@" + s
	}
	if h.Port != 0 {
		s += ":" + strconv.Itoa(h.Port)
	}
	return s
}

func (h Host) target() string {
	if h.User != "" {
		return h.User + "@" + h.Addr
	}
	return h.Addr
}

// ParseHosts reads "user@host[:port],...": user and host of letters, digits, '.', '_' and
// '-', neither beginning with '-'.
func ParseHosts(s string) ([]Host, error) {
	var hosts []Host
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var h Host
		if u, rest, ok := strings.Cut(f, "@"); ok {
			h.User, f = u, rest
		}
		if a, p, ok := strings.Cut(f, ":"); ok {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("parse load host %q: bad port %q", f, p)
			}
			h.Port, f = n, a
		}
		if strings.HasPrefix(f, "-") || strings.HasPrefix(h.User, "-") {
			return nil, fmt.Errorf("parse load host %q: a user or host may not begin with '-' (ssh would read it as an option); want user@host[:port]", f)
		}
		if !plainName(f) || h.User != "" && !plainName(h.User) || strings.Contains(h.User, "@") {
			return nil, fmt.Errorf("parse load host %q: want user@host[:port], of letters, digits, '.', '_' and '-'", f)
		}
		h.Addr = f
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, errors.New("parse load hosts: none given (user@host[:port],...)")
	}
	return hosts, nil
}

// plainName reports whether s is a non-empty run of letters, digits, '.', '_' and '-'.
func plainName(s string) bool {
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return s != ""
}

// Config says how to reach the hosts. The zero value runs "ssh" and "scp" from PATH with
// BatchMode (never a password prompt) and the user's own ssh config.
type Config struct {
	SSH, SCP string // programs; default "ssh", "scp"
	// Options are extra "-o" options for both (e.g. "IdentityFile=...",
	// "UserKnownHostsFile=...", "StrictHostKeyChecking=yes").
	Options []string
	// RemoteDir is where the binary and the results go on the hosts; default
	// /tmp/onehost-load. It must be the ssh user's own directory (made mode 0700 when
	// missing): a run refuses one that another user made, or a link.
	RemoteDir string
	// KillWait bounds the kill over a second ssh on cancel; default 10 s.
	KillWait time.Duration
}

func (c Config) remoteDir() string {
	if c.RemoteDir == "" {
		return "/tmp/onehost-load"
	}
	return c.RemoteDir
}

func (c Config) opts(portFlag string, h Host) []string {
	args := []string{"-o", "BatchMode=yes"}
	for _, o := range c.Options {
		args = append(args, "-o", o)
	}
	if h.Port != 0 {
		args = append(args, portFlag, strconv.Itoa(h.Port))
	}
	return args
}

// SSHCommand is the ssh command line that runs the shell command remote on h.
func (c Config) SSHCommand(h Host, remote string) []string {
	ssh := c.SSH
	if ssh == "" {
		ssh = "ssh"
	}
	return append(append([]string{ssh}, c.opts("-p", h)...), "--", h.target(), remote)
}

// SCPCommand is the scp command line copying from to to; a path prefixed with ":" is
// on h.
func (c Config) SCPCommand(h Host, from, to string) []string {
	scp := c.SCP
	if scp == "" {
		scp = "scp"
	}
	side := func(p string) string {
		if r, ok := strings.CutPrefix(p, ":"); ok {
			return h.target() + ":" + r
		}
		return p
	}
	return append(append([]string{scp, "-q"}, c.opts("-P", h)...), "--", side(from), side(to))
}

func (c Config) exec(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var errBuf bytes.Buffer
	cmd.Stdout = stdout
	cmd.Stderr = &errBuf
	if stderr != nil {
		cmd.Stderr = io.MultiWriter(&errBuf, stderr)
	}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("run %s: %w: %s", argv[0], err, strings.TrimSpace(lastLine(errBuf.String())))
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ownDir is a shell command that makes dir (mode 0700) unless it exists, and fails, saying
// why, unless it is a directory of the ssh user's own and no link; it leaves it mode 0700,
// so that no other user can put or swap a file in it from then on.
func ownDir(dir string) string {
	d := Quote(dir)
	return "umask 077; mkdir -p -m 700 -- " + d + " && [ -d " + d + " ] && [ ! -L " + d + " ] && [ -O " + d + " ] && chmod 700 -- " + d +
		" || { echo \"remote directory \"" + d + "\" is not $(id -un)'s own directory (another user's, or a link): remove it, or choose another\" >&2; exit 1; }"
}

// killPID is a shell command that sends SIGTERM to the pid in the file pidFile when it
// holds a plain number above 1, and says so otherwise: a file holding -1 (every process the
// user may signal), 0 (the shell's process group), 1 (init) or anything else is not obeyed.
func killPID(pidFile string) string {
	return "pid=$(cat " + Quote(pidFile) + "); case \"$pid\" in ''|0*|*[!0-9]*) echo \"pid file holds $pid, not a pid: nothing killed\" >&2 ;; " +
		"*) [ \"$pid\" -gt 1 ] && kill -TERM \"$pid\" ;; esac"
}

// EnsureBinary copies the local file to RemoteDir/name on h unless a copy with the same
// SHA-256 is already there (a file of the ssh user's own), and returns the remote path.
func (c Config) EnsureBinary(ctx context.Context, h Host, local, name string) (string, error) {
	b, err := os.ReadFile(local)
	if err != nil {
		return "", fmt.Errorf("read binary: %w", err)
	}
	sum := sha256.Sum256(b)
	want := hex.EncodeToString(sum[:])
	remote := c.remoteDir() + "/" + name
	var out bytes.Buffer
	check := ownDir(c.remoteDir()) + "; if [ -O " + Quote(remote) + " ] && [ ! -L " + Quote(remote) + " ]; then sha256sum -- " + Quote(remote) + " 2>/dev/null || true; fi"
	if err := c.exec(ctx, c.SSHCommand(h, check), &out, nil); err != nil {
		return "", fmt.Errorf("check binary on %s: %w", h, err)
	}
	if f := strings.Fields(out.String()); len(f) > 0 && f[0] == want {
		return remote, nil
	}
	// Copied beside and renamed into place: a binary running there (another run, or
	// another "host" sharing the file system, as the tests' namespaces do) is never
	// written to (ETXTBSY), and a half-copied one is never run.
	tmp := remote + ".new." + strconv.Itoa(os.Getpid()) + "." + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := c.exec(ctx, c.SCPCommand(h, local, ":"+tmp), nil, nil); err != nil {
		return "", fmt.Errorf("copy binary to %s: %w", h, err)
	}
	if err := c.exec(ctx, c.SSHCommand(h, "chmod +x "+Quote(tmp)+" && mv -f "+Quote(tmp)+" "+Quote(remote)), nil, nil); err != nil {
		return "", fmt.Errorf("copy binary to %s: %w", h, err)
	}
	return remote, nil
}

// Run runs argv on h and waits for it. Its stdout and stderr come back over ssh. When
// ctx ends first, the remote process gets SIGTERM over a second ssh connection (ssh
// without a tty does not pass the hang-up on) and Run returns ctx's error.
func (c Config) Run(ctx context.Context, h Host, argv []string, stdout, stderr io.Writer) error {
	pidFile := c.remoteDir() + "/run." + strconv.Itoa(os.Getpid()) + "." + strconv.FormatInt(time.Now().UnixNano(), 36) + ".pid"
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = Quote(a)
	}
	// The pid file appears whole (written beside, then renamed), so a kill that reads it
	// never sees it half-written.
	remote := ownDir(c.remoteDir()) + " && echo $$ > " + Quote(pidFile+".new") + " && mv " + Quote(pidFile+".new") + " " + Quote(pidFile) + " && exec " + strings.Join(quoted, " ")
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	done := make(chan error, 1)
	go func() { done <- c.exec(runCtx, c.SSHCommand(h, remote), stdout, stderr) }()
	select {
	case err := <-done:
		c.cleanup(h, pidFile)
		if err != nil {
			return fmt.Errorf("run on %s: %w", h, err)
		}
		return nil
	case <-ctx.Done():
	}
	c.kill(h, pidFile)
	select {
	case <-done:
	case <-time.After(c.killWait()):
		stop()
		<-done
	}
	return fmt.Errorf("run on %s: %w", h, ctx.Err())
}

func (c Config) killWait() time.Duration {
	if c.KillWait <= 0 {
		return 10 * time.Second
	}
	return c.KillWait
}

func (c Config) kill(h Host, pidFile string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.killWait())
	defer cancel()
	p := Quote(pidFile)
	// A cancel can come before the remote shell has written its pid (the first ssh is
	// still starting): wait for the file, up to about killWait, rather than kill nothing
	// and leave a generator running on the host.
	tries := strconv.Itoa(int(c.killWait()/(100*time.Millisecond)) + 1)
	c.exec(ctx, c.SSHCommand(h, "i=0; while [ ! -f "+p+" ] && [ $i -lt "+tries+" ]; do sleep 0.1; i=$((i+1)); done; "+
		"test -f "+p+" && { "+killPID(pidFile)+"; }; rm -f "+p), nil, nil)
}

func (c Config) cleanup(h Host, pidFile string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.killWait())
	defer cancel()
	c.exec(ctx, c.SSHCommand(h, "rm -f "+Quote(pidFile)), nil, nil)
}

// Fetch copies the remote file back to local.
func (c Config) Fetch(ctx context.Context, h Host, remote, local string) error {
	if err := c.exec(ctx, c.SCPCommand(h, ":"+remote, local), nil, nil); err != nil {
		return fmt.Errorf("fetch %s from %s: %w", remote, h, err)
	}
	return nil
}

// At returns argv wrapped so that it starts at start by the remote host's clock: a POSIX
// shell sleeps until then (GNU date's milliseconds) and execs argv, keeping the pid that
// Run records. It is for generators without a start-time flag of their own (plain
// autocannon); `autocannon users -start-at` waits inside the generator, more exactly.
// A start already past runs argv at once.
func At(start time.Time, argv []string) []string {
	script := `s=` + strconv.FormatInt(start.UnixMilli(), 10) + `; n=$(date +%s%3N); ` +
		`if [ "$n" -lt "$s" ]; then d=$((s-n)); sleep $((d/1000)).$(printf %03d $((d%1000))); fi; exec "$@"`
	return append([]string{"sh", "-c", script, "sh"}, argv...)
}

// Copies copies local files to hosts once per run: the first Ensure of a (host, file)
// checks the remote copy (EnsureBinary), later ones reuse the path. Safe for concurrent
// use; the zero value is ready.
type Copies struct {
	mu     sync.Mutex
	remote map[string]string // host + "\x00" + name → remote path
}

// Ensure is c.EnsureBinary(ctx, h, local, name), done once per (h, name).
func (cp *Copies) Ensure(ctx context.Context, c Config, h Host, local, name string) (string, error) {
	key := h.String() + "\x00" + name
	cp.mu.Lock()
	p, ok := cp.remote[key]
	cp.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := c.EnsureBinary(ctx, h, local, name)
	if err != nil {
		return "", err
	}
	cp.mu.Lock()
	if cp.remote == nil {
		cp.remote = map[string]string{}
	}
	cp.remote[key] = p
	cp.mu.Unlock()
	return p, nil
}

// Output is what one host's command printed, and how it ended.
type Output struct {
	Stdout, Stderr []byte
	Err            error
}

// RunAll runs argv(i) on every host i at once (nil: host i sits this one out) and waits
// for all of them; out[i] is host i's. The goroutines are RunAll's own and end with it.
// argv may itself do remote work first (copy a binary): it runs in host i's goroutine.
func (c Config) RunAll(ctx context.Context, hosts []Host, argv func(ctx context.Context, i int) ([]string, error)) []Output {
	out := make([]Output, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := argv(ctx, i)
			if err != nil || a == nil {
				out[i].Err = err
				return
			}
			var so, se bytes.Buffer
			out[i].Err = c.Run(ctx, h, a, &so, &se)
			out[i].Stdout, out[i].Stderr = so.Bytes(), se.Bytes()
		}()
	}
	wg.Wait()
	return out
}

// Each runs f(ctx, i) for every host i at once and waits for all; it returns the first
// host's error in host order, naming the host. For the work before a run's start time
// is agreed (copying the binary), which must not eat into the run's lead.
func Each(ctx context.Context, hosts []Host, f func(ctx context.Context, i int) error) error {
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(ctx, i) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("host %s: %w", hosts[i], err)
		}
	}
	return nil
}

// Remove deletes the remote files on h (a run's results once fetched).
func (c Config) Remove(ctx context.Context, h Host, paths ...string) error {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = Quote(p)
	}
	if err := c.exec(ctx, c.SSHCommand(h, "rm -f "+strings.Join(q, " ")), nil, nil); err != nil {
		return fmt.Errorf("remove files on %s: %w", h, err)
	}
	return nil
}
