package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/configs"
	"github.com/onehost/onehost/internal/ceiling"
	"github.com/onehost/onehost/internal/challenge"
	"github.com/onehost/onehost/internal/cpuquota"
	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/journey"
)

// challengeConfig is `ceiling challenge`'s command line.
type challengeConfig struct {
	instances                      int
	cores                          float64
	serverCPUs, genCPUs            string
	genFIFO                        int
	users                          int
	search                         journey.SearchConfig
	timeScale                      float64
	worker, supervisor, autocannon string
	seed, tokens, secret, peerFeed string
	node, out, config              string
	otherCores                     float64
	// -load-hosts: the generator runs on these hosts over ssh (loadhosts.go); the
	// server listens on -server-host, which they must reach.
	hosts *loadHostFlags
}

func parseChallenge(args []string, getenv func(string) string, stderr io.Writer) (challengeConfig, error) {
	fs := flag.NewFlagSet("ceiling challenge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := challengeConfig{}
	fs.IntVar(&c.instances, "instances", 0, "0: one worker alone (as the challenge's entries ran); N: the cluster (supervisor) with N workers")
	fs.Float64Var(&c.cores, "cpu", 0.2, "CPU quota per worker, in cores (0.2 = 20 % of one core; the cluster gets instances times it); 0: no quota")
	fs.StringVar(&c.serverCPUs, "server-cpus", "", "cores the server runs on (default: the last core)")
	fs.StringVar(&c.genCPUs, "gen-cpus", "", "cores the load generator runs on (default: all others)")
	fs.IntVar(&c.genFIFO, "gen-fifo", 0, "run the load generator at this SCHED_FIFO real-time priority (1-99, root): nothing else on its cores delays its timers (docs/bench.md, the late seconds at 50,000 users); 0: the normal policy")
	fs.IntVar(&c.users, "users", 0, "run one trial of this many users instead of the search")
	fs.Float64Var(&c.timeScale, "time-scale", 2, "each user offers this many users' requests (think times divided by it): 20,000 users at 2 are 40,000 user-equivalents, within one generator process's descriptors")
	fs.DurationVar(&c.search.Run.Ramp, "ramp", 30*time.Second, "ramp-up of each trial (the challenge: 60s)")
	fs.DurationVar(&c.search.Run.Hold, "hold", time.Minute, "hold of each search trial (the challenge: 5m)")
	fs.DurationVar(&c.search.Run.RampDown, "rampdown", 5*time.Second, "ramp-down of each trial (the challenge: 30s)")
	fs.DurationVar(&c.search.ConfirmHold, "confirm-hold", 2*time.Minute, "hold of the confirming trial (the challenge: 5m)")
	fs.IntVar(&c.search.Warmup, "warmup", 1000, "users of the unjudged warm-up trial (0: none)")
	fs.IntVar(&c.search.Start, "start", 2500, "users of the first judged trial, doubled while trials pass")
	fs.IntVar(&c.search.Step, "step", 250, "resolution of the bisection, in users")
	fs.IntVar(&c.search.Max, "max", 160000, "stop doubling above this many users")
	fs.DurationVar(&c.search.Pause, "pause", 5*time.Second, "rest between trials (TIME_WAIT connections drain)")
	fs.StringVar(&c.worker, "worker", sibling("worker", "bin/worker"), "worker binary")
	fs.StringVar(&c.supervisor, "supervisor", sibling("supervisor", "bin/supervisor"), "supervisor binary")
	fs.StringVar(&c.autocannon, "autocannon", sibling("autocannon", "bin/autocannon"), "autocannon binary (the generator)")
	fs.StringVar(&c.seed, "seed", "data/seed.db", "seed database; each server gets a fresh copy")
	fs.StringVar(&c.tokens, "tokens", "data/tokens.json", "the users' tokens (worker seed -tokens)")
	fs.StringVar(&c.secret, "jwt-secret", getenv("JWT_SECRET"), secretUsage)
	fs.StringVar(&c.peerFeed, "peer-feed", getenv("PEER_FEED"), "a node-feed peer directory with node_modules: scored after ours in the same run (env PEER_FEED)")
	fs.StringVar(&c.node, "node", "node", "node binary (the peer)")
	fs.StringVar(&c.out, "out", "", "also write the scores as JSON to this file")
	fs.StringVar(&c.config, "config", "", "with -instances: the supervisor's configuration (default: configs/cluster.yaml as built into this binary)")
	fs.Float64Var(&c.otherCores, "other-cores", 0, "a trial beside this much other work on the host, in cores, is host-busy and scores nothing (default 0.1, as the sweep's host-busy)")
	c.hosts = addLoadHostFlags(fs, "bin/autocannon and the tokens are")
	fs.Func("saturation", "thresholds of the generator's verdict, passed to autocannon users: hiccup=50ms,send-lag=100ms,cpu=0.95,connect=5ms,min-late=5 (docs/bench.md)", func(v string) (err error) {
		c.search.Run.Saturation, err = genhealth.ParseThresholds(v)
		return err
	})
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("challenge: unexpected argument %q", fs.Arg(0))
	case c.instances < 0 || c.instances > 1024:
		return c, fmt.Errorf("challenge: -instances %d: want 0 (one worker) to 1024", c.instances)
	case c.cores < 0 || c.cores > 1024:
		return c, fmt.Errorf("challenge: -cpu %v: want cores from 0 (no quota) to 1024, such as 0.2", c.cores)
	case c.timeScale < 1:
		return c, fmt.Errorf("challenge: -time-scale %v: want 1 or more", c.timeScale)
	case c.users < 0:
		return c, fmt.Errorf("challenge: -users %d: want 0 (search) or a number of users", c.users)
	case c.genFIFO < 0 || c.genFIFO > 99:
		return c, fmt.Errorf("challenge: -gen-fifo %d: want 1-99 (SCHED_FIFO priority), or 0 for the normal policy", c.genFIFO)
	case c.otherCores < 0:
		return c, fmt.Errorf("challenge: -other-cores %v: want cores of other work, such as 0.1 (0: the default)", c.otherCores)
	}
	if c.search.Warmup == 0 {
		c.search.Warmup = -1 // journey.SearchConfig: negative is none
	}
	c.search.Run.TimeScale = c.timeScale
	c.secret = orDefaultSecret(c.secret)
	for _, f := range []string{c.seed, c.tokens} {
		if _, err := os.Stat(f); err != nil {
			return c, fmt.Errorf("challenge: %w (make seed writes it)", err)
		}
	}
	return c, nil
}

func runChallenge(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseChallenge(args, getenv, stderr)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("challenge: %w", err)
	}
	serverCPUs, genCPUs, err := challengeCPUs(c.serverCPUs, c.genCPUs)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "onehost-challenge-")
	if err != nil {
		return fmt.Errorf("challenge: %w", err)
	}
	defer os.RemoveAll(work)
	if c.instances > 0 && c.config == "" {
		// The one this binary carries, so that the challenge runs from any directory.
		if c.config, err = configs.WriteCluster(work); err != nil {
			return fmt.Errorf("challenge: write the built-in cluster configuration: %w", err)
		}
	}

	logf := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	// Rounded to a millionth of a core: 3 × 0.2 is 0.6000000000000001 in floating point,
	// and the quota is printed and written as asked for.
	quotaCores := math.Round(c.cores*float64(max(c.instances, 1))*1e6) / 1e6
	note := ""
	if c.cores > 0 {
		// Say now, not after an hour, whether the quota can be had here.
		q, err := cpuquota.Create(cpuquota.Config{}, fmt.Sprintf("onehost-challenge-%d-probe", os.Getpid()), quotaCores)
		if err != nil {
			note = fmt.Sprintf("No CPU quota: %v. The servers run UNLIMITED on cores %s: the scores are not the challenge's.", err, ceiling.FormatCPUList(serverCPUs))
			logf("%s", note)
			quotaCores = 0
		} else {
			q.Remove()
			unit := "cores"
			if quotaCores == 1 {
				unit = "core"
			}
			note = fmt.Sprintf("CPU quota: %g %s (cgroup v%d, %v period) for each server, on cores %s; the generator on cores %s.",
				quotaCores, unit, q.Version, cpuquota.Period, ceiling.FormatCPUList(serverCPUs), ceiling.FormatCPUList(genCPUs))
		}
	}
	genPin := selfPinFIFO(self, c.genFIFO)

	ours := challenge.Server{Name: "worker"}
	if c.instances > 0 {
		ours.Name = fmt.Sprintf("cluster of %d", c.instances)
	}
	ours.Start = func(ctx context.Context) (int, string, func() error, error) {
		db, port, err := serverFiles(c.seed, filepath.Join(work, "ours"))
		if err != nil {
			return 0, "", nil, err
		}
		env := append([]string{"SQLITE_PATH=" + db, "LOG_LEVEL=warn"}, secretEnv(c.secret)...)
		argv := []string{c.worker}
		env = append(env, "HOST="+c.hosts.serverHost, "PORT="+strconv.Itoa(port), "GOMAXPROCS=1")
		if c.instances > 0 {
			argv = []string{c.supervisor, "run", "-config", c.config, "-instances", strconv.Itoa(c.instances), "-listen",
				net.JoinHostPort(c.hosts.serverHost, strconv.Itoa(port)), "-socket", filepath.Join(work, "ours", "s.sock"), "-log-level", "warn"}
		}
		return startQuoted(ctx, self, "ours", quotaCores, serverCPUs, argv, env, net.JoinHostPort(c.hosts.serverHost, strconv.Itoa(port)), filepath.Join(work, "ours", "server.log"))
	}
	servers := []challenge.Server{ours}
	if c.peerFeed != "" {
		if _, err := os.Stat(filepath.Join(c.peerFeed, "node_modules")); err != nil {
			return fmt.Errorf("challenge: -peer-feed %s: %w (npm install there first)", c.peerFeed, err)
		}
		servers = append(servers, challenge.Server{Name: "node peer", Start: func(ctx context.Context) (int, string, func() error, error) {
			db, port, err := serverFiles(c.seed, filepath.Join(work, "peer"))
			if err != nil {
				return 0, "", nil, err
			}
			env := []string{"SQLITE_PATH=" + db, "JWT_SECRET=" + c.secret, "PORT=" + strconv.Itoa(port)}
			// The peer is one process, as the Node entry was: it gets one worker's quota.
			return startQuoted(ctx, self, "peer", c.cores, serverCPUs, []string{c.node, filepath.Join(c.peerFeed, "feed.js")}, env, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
				filepath.Join(work, "peer", "server.log"))
		}})
	}

	search := c.search
	search.Trial = func(ctx context.Context, rc journey.Config) (journey.Result, error) {
		return generatorTrial(ctx, genPin(genCPUs, usersArgv(c.autocannon, c.tokens, rc, rc.Users)))
	}
	if len(c.hosts.hosts) > 0 {
		ht := &hostsTrial{ssh: c.hosts.ssh(), hosts: c.hosts.hosts, autocannon: c.autocannon, tokens: c.tokens, lead: c.hosts.lead}
		search.Trial = ht.trial
		note += c.hosts.note()
	}
	mode := "the challenge's search"
	if c.users > 0 {
		mode = fmt.Sprintf("one trial of %d users", c.users)
	}
	logf("ceiling challenge: %s; %s", mode, note)
	scores, err := challenge.Run(ctx, challenge.Config{Servers: servers, Search: search, Users: c.users, Logf: logf, OtherCores: c.otherCores})
	challenge.WriteReport(stdout, scores, search, quotaCores, note)
	if c.out != "" {
		b, jerr := json.MarshalIndent(struct {
			Command string            `json:"command"`
			Quota   float64           `json:"quota_cores"`
			Scores  []challenge.Score `json:"scores"`
		}{Command: fmt.Sprint(os.Args), Quota: quotaCores, Scores: scores}, "", " ")
		if jerr == nil {
			jerr = os.WriteFile(c.out, b, 0o644)
		}
		if jerr != nil {
			return fmt.Errorf("challenge: write %s: %w", c.out, jerr)
		}
	}
	return err
}

// challengeCPUs chooses the server's and the generator's cores: by default the server
// gets the last core this process may use and the generator the others (all of them on a
// one-core machine).
func challengeCPUs(server, gen string) (srv, g []int, err error) {
	var set []int
	var mask unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mask); err != nil {
		return nil, nil, fmt.Errorf("challenge: read this process's cores: %w", err)
	}
	for i := range 1024 {
		if mask.IsSet(i) {
			set = append(set, i)
		}
	}
	if server != "" {
		if srv, err = ceiling.ParseCPUList(server); err != nil {
			return nil, nil, fmt.Errorf("challenge: -server-cpus: %w", err)
		}
	} else {
		srv = set[len(set)-1:]
	}
	if gen != "" {
		if g, err = ceiling.ParseCPUList(gen); err != nil {
			return nil, nil, fmt.Errorf("challenge: -gen-cpus: %w", err)
		}
		return srv, g, nil
	}
	taken := map[int]bool{}
	for _, c := range srv {
		taken[c] = true
	}
	for _, c := range set {
		if !taken[c] {
			g = append(g, c)
		}
	}
	if len(g) == 0 {
		g = set
	}
	return srv, g, nil
}

// startQuoted starts argv on cpus, inside a fresh quota of cores (none when 0), waits until
// it answers GET /health at hostPort, and returns its pid, URL and stop.
func startQuoted(ctx context.Context, self, name string, cores float64, cpus []int,
	argv, env []string, hostPort string, logPath string) (int, string, func() error, error) {
	var q *cpuquota.Quota
	if cores > 0 {
		var err error
		if q, err = cpuquota.Create(cpuquota.Config{}, fmt.Sprintf("onehost-challenge-%d-%s", os.Getpid(), name), cores); err != nil {
			return 0, "", nil, err
		}
	}
	full := []string{self, "pin", "-cpus", ceiling.FormatCPUList(cpus)}
	if q != nil {
		// `ceiling pin -cgroup DIR` joins the cgroup before it execs: every process of
		// the server is born in it.
		full = append(full, "-cgroup", q.Dir)
	}
	full = append(append(full, "--"), argv...)
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, "", nil, err
	}
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		if q != nil {
			q.Remove()
		}
		return 0, "", nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	stop := func() error {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		var err error
		select {
		case err = <-done:
		case <-time.After(15 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			err = <-done
		}
		if q != nil {
			// The processes are gone; a cgroup can only be removed empty.
			for i := 0; i < 50 && q.Remove() != nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = nil // stopped by our signal
		}
		return err
	}
	url := "http://" + hostPort
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-done:
			done <- err
			b, _ := os.ReadFile(logPath)
			stop()
			return 0, "", nil, fmt.Errorf("%s exited before it served: %v\n%s", argv[0], err, ceiling.Tail(b, 1000))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return 0, "", nil, fmt.Errorf("%s did not answer /health within 60 s", argv[0])
		}
	}
	return cmd.Process.Pid, url, stop, nil
}

// usersArgv is the `autocannon users` command line of one trial's n users (all of rc's,
// or one load host's share, whose flags come in share), printing its result as JSON.
func usersArgv(bin, tokens string, rc journey.Config, n int, share ...string) []string {
	argv := append([]string{bin, "users", "-n", strconv.Itoa(n)}, share...)
	if s := rc.Saturation.String(); s != "" {
		argv = append(argv, "-saturation", s)
	}
	return append(argv, "-time-scale", strconv.FormatFloat(rc.TimeScale, 'g', -1, 64),
		"-ramp", rc.Ramp.String(), "-hold", rc.Hold.String(), "-rampdown", rc.RampDown.String(),
		"-progress", "0", "-j", "-tokens", tokens, rc.URL)
}

// generatorTrial runs one `autocannon users -j` and reads its result. The generator exits
// 1 when the trial fails the challenge's thresholds, or when its own verdict says it was
// saturated (Result.Health: the search then does not score the trial), with the result on
// stdout all the same.
func generatorTrial(ctx context.Context, argv []string) (journey.Result, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	var r journey.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Requests == 0 && runErr != nil {
		return r, fmt.Errorf("generator: %v %v\n%s", runErr, err, ceiling.Tail(errb.Bytes(), 1000))
	}
	return r, nil
}

// serverFiles makes dir, a fresh copy of the seed in it, and picks a port.
func serverFiles(seed, dir string) (db string, port int, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	db = filepath.Join(dir, "feed.db")
	if err := ceiling.CopyFile(seed, db); err != nil {
		return "", 0, fmt.Errorf("copy the seed: %w", err)
	}
	addr, err := ceiling.FreePort()
	if err != nil {
		return "", 0, err
	}
	_, p, _ := net.SplitHostPort(addr)
	port, err = strconv.Atoi(p)
	return db, port, err
}
