package frontproxy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// confDir holds the templates this package renders.
const confDir = "../../configs/nginx"

var templates = []string{"front", "cache", "static"}

func readTemplate(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(confDir, name+".conf"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// needNginx returns the nginx binary, or skips the test when there is none.
func needNginx(t testing.TB) string {
	t.Helper()
	bin, err := LookPath()
	if err != nil {
		t.Skipf("%v: .ci/run installs it; this test needs a real nginx", err)
	}
	return bin
}

func TestRender(t *testing.T) {
	tests := []struct {
		name    string
		tmpl    string
		p       Params
		want    string
		wantErr string
	}{
		{"defaults", "listen @LISTEN@; server @UPSTREAM@; worker_processes @WORKER_PROCESSES@; @WORKER_CONNECTIONS@ @RLIMIT_NOFILE@",
			Params{}, "listen 127.0.0.1:8080; server 127.0.0.1:3000; worker_processes auto; 16384 65535", ""},
		{"all set", "@LISTEN@ @UPSTREAM@ @WORKER_PROCESSES@ @WORKER_CONNECTIONS@ @RLIMIT_NOFILE@ @STATIC_ROOT@/",
			Params{Listen: "127.0.0.1:9", Upstream: "10.0.0.1:3000", WorkerProcesses: 1, WorkerConnections: 64, RlimitNofile: 256, StaticRoot: "/srv/static/"},
			"127.0.0.1:9 10.0.0.1:3000 1 64 256 /srv/static/", ""},
		{"nginx variables untouched", "add_header X-Cache-Status $upstream_cache_status; # user@host",
			Params{}, "add_header X-Cache-Status $upstream_cache_status; # user@host", ""},
		{"unknown placeholder", "listen @PORT@;", Params{}, "", "unknown placeholder @PORT@"},
		{"static root missing", "alias @STATIC_ROOT@/;", Params{}, "", "set Params.StaticRoot"},
		{"static root relative", "alias @STATIC_ROOT@/;", Params{StaticRoot: "internal/shop/static"}, "", "not absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render([]byte(tt.tmpl), tt.p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Render = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Render = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestTemplatesSetTheLimits pins what the brief and the article ask of every template.
func TestTemplatesSetTheLimits(t *testing.T) {
	common := []string{
		"worker_rlimit_nofile @RLIMIT_NOFILE@;", "worker_connections @WORKER_CONNECTIONS@;",
		"keepalive 64;", "proxy_http_version 1.1;", `proxy_set_header Connection "";`,
		"access_log off;", "pid nginx.pid;", "error_log error.log",
	}
	only := map[string][]string{
		"cache":  {"proxy_cache micro;", "proxy_cache_valid 200 10s;", "proxy_cache_lock on;", "add_header X-Cache-Status $upstream_cache_status always;", "location = /products {"},
		"static": {"location /static/ {", "sendfile on;", "open_file_cache max=", "etag on;"},
	}
	for _, name := range templates {
		t.Run(name, func(t *testing.T) {
			tmpl := string(readTemplate(t, name))
			for _, s := range append(common, only[name]...) {
				if !strings.Contains(tmpl, s) {
					t.Errorf("%s.conf lacks %q", name, s)
				}
			}
			// No system path: everything lives under the prefix.
			for _, s := range []string{"/var/", "/etc/", "/run/", "include ", "\nuser "} {
				if strings.Contains(tmpl, s) {
					t.Errorf("%s.conf mentions %q: it must write only under its prefix", name, s)
				}
			}
			if name != "cache" && strings.Contains(tmpl, "proxy_cache ") {
				t.Errorf("%s.conf caches: only cache.conf may", name)
			}
		})
	}
}

// TestRenderMatchesScript checks that configs/nginx/nginx.sh (make nginx) and Render give
// the same bytes for the same parameters.
func TestRenderMatchesScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	p := Params{Listen: "127.0.0.1:18081", Upstream: "127.0.0.1:3999", StaticRoot: "/srv/shop static",
		WorkerProcesses: 2, WorkerConnections: 1024, RlimitNofile: 4096}
	prefix := t.TempDir()
	for _, name := range templates {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command("bash", filepath.Join(confDir, "nginx.sh"), "render", name)
			cmd.Env = append(os.Environ(), "NGINX_PREFIX="+prefix, "NGINX_LISTEN="+p.Listen, "UPSTREAM="+p.Upstream,
				"STATIC_ROOT="+p.StaticRoot, "WORKER_PROCESSES=2", "WORKER_CONNECTIONS=1024", "RLIMIT_NOFILE=4096")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("nginx.sh render %s: %v", name, err)
			}
			got, err := os.ReadFile(strings.TrimSpace(string(out)))
			if err != nil {
				t.Fatal(err)
			}
			want, err := Render(readTemplate(t, name), p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("nginx.sh render %s differs from Render:\n%s\nwant:\n%s", name, got, want)
			}
		})
	}
}

// TestConfigsPassNginxCheck runs nginx -t on each rendered template.
func TestConfigsPassNginxCheck(t *testing.T) {
	bin := needNginx(t)
	for _, name := range templates {
		t.Run(name, func(t *testing.T) {
			prefix := t.TempDir()
			conf, err := Render(readTemplate(t, name), Params{StaticRoot: prefix, WorkerProcesses: 1, RlimitNofile: 1024})
			if err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755)
			path := filepath.Join(prefix, "nginx.conf")
			os.WriteFile(path, conf, 0o644)
			out, err := exec.Command(bin, "-t", "-p", prefix+"/", "-c", path, "-e", filepath.Join(prefix, "error.log")).CombinedOutput()
			if err != nil {
				t.Fatalf("nginx -t: %v\n%s", err, out)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"debian", "nginx version: nginx/1.22.1\n", "1.22.1", true},
		{"with suffix", "nginx version: nginx/1.25.3 (Ubuntu)", "1.25.3", true},
		{"openresty", "nginx version: openresty/1.21.4.1", "", false},
		{"two parts", "nginx version: nginx/1.22", "", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseVersion(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseVersion(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
	for _, c := range []struct {
		v, min string
		want   bool
	}{{"1.22.1", "1.19.5", true}, {"1.19.5", "1.19.5", true}, {"1.19.4", "1.19.5", false}, {"1.9.15", "1.19.5", false}, {"2.0.0", "1.19.5", true}} {
		if got := atLeast(c.v, c.min); got != c.want {
			t.Errorf("atLeast(%s, %s) = %v, want %v", c.v, c.min, got, c.want)
		}
	}
}

// TestStartFailureSaysWhy: a config nginx rejects comes back as an error quoting the log.
func TestStartFailureSaysWhy(t *testing.T) {
	needNginx(t)
	_, err := Start(context.Background(), []byte("events {}\nhttp { server { listen @LISTEN@; bogus_directive on; } }\n"),
		Options{Prefix: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "bogus_directive") {
		t.Fatalf("Start = %v, want an error quoting nginx's complaint about bogus_directive", err)
	}
}

// TestWrap: a wrapper that execs nginx runs it (here nice(1), raising the niceness), Pid
// is the master's, which runs with what the wrapper set, and Argv records the wrapped
// command line.
func TestWrap(t *testing.T) {
	needNginx(t)
	nice, err := exec.LookPath("nice")
	if err != nil {
		t.Skip("no nice(1) to wrap nginx with")
	}
	px, err := Start(context.Background(), []byte("events {}\nhttp { server { listen @LISTEN@; } }\n"), Options{
		Prefix: t.TempDir(),
		Params: Params{WorkerProcesses: 1, WorkerConnections: 64, RlimitNofile: 256},
		Wrap:   func(argv []string) []string { return append([]string{nice, "-n", "7"}, argv...) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Stop()
	if argv := px.Argv(); len(argv) < 4 || argv[0] != nice || argv[3] == "" {
		t.Errorf("Argv = %q, want the wrapper first", argv)
	}
	base := niceOf(t, os.Getpid())
	if got := niceOf(t, px.Pid()); got != base+7 {
		t.Errorf("nginx master (pid %d) runs at nice %d, want %d (the wrapper's)", px.Pid(), got, base+7)
	}
	if err := px.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// niceOf is field 19 of /proc/PID/stat, counted after the command name's closing ')'.
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	var n int
	if _, err := fmt.Sscan(f[16], &n); err != nil {
		t.Fatalf("nice of pid %d: %v", pid, err)
	}
	return n
}
