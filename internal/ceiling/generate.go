// Driving the load: which generator, its command line, running it (here or on the
// load hosts) and what its output and the server's log say went wrong.

package ceiling

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// generatorFor picks wrk for scripted workloads or when autocannon is absent.
func (s *Sweeper) generatorFor(wl Workload) string {
	if s.useAC && wl.WrkScript == "" {
		return "autocannon"
	}
	return "wrk"
}

// genArgv is the generator's command for one run of d.
func (s *Sweeper) genArgv(gen string, wl Workload, srv *Server, conns, threads int, d time.Duration) ([]string, error) {
	url := "http://" + srv.Addr + wl.Path
	secs := strconv.Itoa(int(d / time.Second))
	method := wl.Method
	if method == "" {
		method = "GET"
	}
	if gen == "autocannon" {
		argv := s.autocannonArgv(s.cfg.Autocannon, wl, srv.Addr, conns, threads, d)
		// The generator samples the server's tree beside its load (kept in its report).
		return append(argv[:len(argv)-1], "--server-pid", strconv.Itoa(srv.PID()), argv[len(argv)-1]), nil
	}
	script := filepath.Join(s.cfg.WorkDir, "wrk-"+wl.Name+".lua")
	include := ""
	if wl.WrkScript != "" {
		abs, err := filepath.Abs(wl.WrkScript)
		if err != nil {
			return nil, fmt.Errorf("wrk script: %w", err)
		}
		include = abs
		url = "http://" + srv.Addr + "/"
	}
	if err := os.WriteFile(script, []byte(WrkScript(method, wl.Headers, wl.Body, include)), 0o644); err != nil {
		return nil, fmt.Errorf("write wrk script: %w", err)
	}
	if s.cfg.Pipelining > 1 {
		s.log.Warn("wrk does not pipeline: running with one request in flight per connection", zap.String("workload", wl.Name))
	}
	return []string{s.cfg.Wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", secs + "s",
		"--timeout", "10s", "-s", script, url}, nil
}

// autocannonArgv is autocannon's command (the binary bin) for one run of d against the
// server at addr, its URL last.
func (s *Sweeper) autocannonArgv(bin string, wl Workload, addr string, conns, threads int, d time.Duration) []string {
	method := wl.Method
	if method == "" {
		method = "GET"
	}
	argv := []string{bin, "-c", strconv.Itoa(conns), "-p", strconv.Itoa(s.cfg.Pipelining),
		"-d", strconv.Itoa(int(d / time.Second)), "-w", strconv.Itoa(threads), "-j", "-n", "-m", method}
	for _, h := range wl.Headers {
		argv = append(argv, "-H", h)
	}
	if wl.Body != "" {
		argv = append(argv, "-b", wl.Body)
	}
	return append(argv, "http://"+addr+wl.Path)
}

type genResult struct {
	outcome Outcome
	cpuS    float64 // the generator's user+system seconds
	stderr  []byte
}

// runGen runs one generator command and parses its report.
func (s *Sweeper) runGen(ctx context.Context, gen string, argv []string) (genResult, error) {
	var res genResult
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append([]string(nil), s.cfg.Environ...), "TOKENS="+s.cfg.Tokens)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	res.stderr = stderr.Bytes()
	if cmd.ProcessState != nil {
		res.cpuS = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		return res, fmt.Errorf("run %s: %w: %s", filepath.Base(argv[0]), err, Tail(append(stdout.Bytes(), stderr.Bytes()...), 400))
	}
	if gen == "autocannon" {
		_, res.outcome, err = ParseAutocannon(stdout.Bytes())
	} else {
		res.outcome, err = ParseWrk(stdout.Bytes())
	}
	if err != nil {
		return res, fmt.Errorf("%w: %s", err, Tail(append(stdout.Bytes(), stderr.Bytes()...), 400))
	}
	return res, nil
}

// probe sends one request of the workload and fails unless it is answered 2xx or 3xx,
// and, for a workload that asks for a content coding, in that coding: a server that
// answers identity would be measured under the coding's name.
func probe(ctx context.Context, addr string, wl Workload) error {
	method := wl.Method
	if method == "" || wl.WrkScript != "" {
		method = "GET"
	}
	var body io.Reader
	if wl.Body != "" && wl.WrkScript == "" {
		body = strings.NewReader(wl.Body)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+wl.Path, body)
	if err != nil {
		return fmt.Errorf("probe %s: %w", wl.Path, err)
	}
	for _, h := range wl.Headers {
		if k, v, ok := strings.Cut(h, ":"); ok {
			req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s %s: %w", method, wl.Path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("probe %s %s: %s (route missing in this worker?)", method, wl.Path, resp.Status)
	}
	if want := requestedCoding(wl.Name); want != "" && !strings.EqualFold(resp.Header.Get("Content-Encoding"), want) {
		return fmt.Errorf("probe %s %s: asked Accept-Encoding: %s, answered Content-Encoding %q: this server does not compress the route (is compression on for it?)",
			method, wl.Path, want, resp.Header.Get("Content-Encoding"))
	}
	return nil
}

// errorText collects error lines worth a verdict: the generator's stderr and the server
// log written during the run.
func errorText(genStderr []byte, logPath string, off int64) string {
	var lines []string
	keep := func(b []byte) {
		for _, l := range strings.Split(string(b), "\n") {
			ll := strings.ToLower(l)
			if fdError(ll) != "" || strings.Contains(ll, "error") || strings.Contains(ll, "warn") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
	}
	keep(genStderr)
	if f, err := os.Open(logPath); err == nil {
		if _, err := f.Seek(off, io.SeekStart); err == nil {
			b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
			keep(b)
		}
		f.Close()
	}
	s := strings.Join(lines, " | ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}
