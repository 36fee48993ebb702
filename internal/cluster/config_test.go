package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestParseConfig(t *testing.T) {
	in := `
instances: max
listen: 0.0.0.0:8080
command: [./bin/worker, -log-level, warn]
env: {JWT_SECRET: s}
kill_timeout: 1600
listen_timeout: 5s
exp_backoff_restart_delay: 100ms
min_uptime: 2s
max_restarts: 3
max_memory_restart: 300M
heartbeat_timeout: 7s
`
	c, err := ParseConfig(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if c.Instances != InstancesMax || c.Listen != "0.0.0.0:8080" || len(c.Command) != 3 || c.Env["JWT_SECRET"] != "s" {
		t.Errorf("got %+v", c)
	}
	if c.KillTimeout.D() != 1600*time.Millisecond || c.ListenTimeout.D() != 5*time.Second ||
		c.MinUptime.D() != 2*time.Second || c.MaxRestarts != 3 || c.MaxMemoryRestart != 300<<20 ||
		c.HeartbeatTimeout.D() != 7*time.Second {
		t.Errorf("got %+v", c)
	}
	if got, want := c.Instances.Count(), runtime.GOMAXPROCS(0); got != want {
		t.Errorf("max = %d workers, want GOMAXPROCS %d", got, want)
	}
}

func TestConfigErrorsNameFieldAndRange(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"instances too low", "instances: -2", "instances: \"-2\" is out of range: want max, -1 or 1 to 1024"},
		{"instances word", "instances: all", "instances: \"all\" is out of range"},
		{"instances too high", "instances: 5000", "instances: \"5000\" is out of range"},
		{"listen without port", "listen: localhost", "listen: \"localhost\" is not HOST:PORT"},
		{"listen port", "listen: 127.0.0.1:70000", "listen: port \"70000\" is out of range: want 0 to 65535"},
		{"agent without port", "agent: localhost", "agent: \"localhost\" is not HOST:PORT (say agent: 0.0.0.0:9777"},
		{"agent port", "agent: 0.0.0.0:99999", "agent: port \"99999\" is out of range: want 0 to 65535"},
		{"kill_timeout too long", "kill_timeout: 11m", "kill_timeout: 11m0s is out of range: want 0 (default) to 10m0s"},
		{"kill_timeout garbage", "kill_timeout: soon", `kill_timeout: "soon" is not a duration (line 1): write a duration such as 5s, 1.5s or 500ms, or a number of milliseconds (1500)`},
		{"duration on a later line", "instances: 2\nrestart_delay: 1 second", `restart_delay: "1 second" is not a duration (line 2): write a duration such as 5s`},
		{"duration not a scalar", "listen_timeout: [1s]", "listen_timeout: not a duration (line 1): write"},
		{"milliseconds out of range", "min_uptime: 90000000", "min_uptime: 90000000 ms is out of range: want 0 to 86400000 (24h) (line 1): write"},
		{"negative duration", "min_uptime: -1s", "min_uptime: -1s is negative (line 1): write"},
		{"backoff over cap", "exp_backoff_restart_delay: 20s", "exp_backoff_restart_delay: 20s is out of range: want 0 (default) to 15s"},
		{"max_restarts", "max_restarts: -1", "max_restarts: -1 is out of range"},
		{"memory too small", "max_memory_restart: 10K", "max_memory_restart: 10240 bytes is out of range: want 0 (off) or 1M to 1T"},
		{"memory garbage", "max_memory_restart: lots", "max_memory_restart: \"lots\" is not a size"},
		{"unknown field", "instance: 2", "field instance not found"},
		{"empty env name", "env: {\"\": x}", "env: \"\" is not a variable name"},
		{"empty program", "command: [\"\"]", "command: the program name is empty"},
		{"heartbeat below two polls", "stats_interval: 2s\nheartbeat_timeout: 3s", "heartbeat_timeout: 3s is out of range: want at least twice stats_interval (2s)"},
		{"self_bind with port 0", "self_bind: true\nlisten: 127.0.0.1:0", "self_bind: needs a fixed port"},
		{"exec_mode unknown", "exec_mode: threads", `exec_mode: "threads": want cluster (default) or fork`},
		{"fork with listen", "exec_mode: fork\nlisten: 127.0.0.1:3000", `listen: "127.0.0.1:3000": exec_mode: fork gets no socket`},
		{"fork with self_bind", "exec_mode: fork\nself_bind: true", "self_bind: exec_mode: fork binds nothing"},
		{"fork with steering", "exec_mode: fork\nsteering: hash", `steering: "hash": exec_mode: fork has no shared socket`},
		{"steering word", "steering: least-conn", "steering: \"least-conn\" is not a steering mode: want auto (default), hash or round-robin"},
		{"round robin with self_bind", "steering: round-robin\nself_bind: true\nlisten: 127.0.0.1:3000", "steering: round-robin needs the supervisor's sockets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseConfig(%q) error = %v, want it to contain %q", tt.yaml, err, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	c = c.WithDefaults()
	if c.Listen != DefaultListen || c.KillTimeout.D() != DefaultKillTimeout || c.MaxRestarts != 16 ||
		c.ExpBackoffRestartDelay.D() != DefaultExpBackoff || c.WorkerGOMAXPROCS != 1 {
		t.Errorf("defaults = %+v", c)
	}
}

// TestShippedConfig keeps configs/cluster.yaml loadable.
func TestShippedConfig(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "cluster.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Skip("no configs/cluster.yaml")
	}
	if _, err := LoadConfig(path); err != nil {
		t.Fatal(err)
	}
}

func TestParseScale(t *testing.T) {
	tests := []struct {
		arg      string
		n        int
		relative bool
		bad      bool
	}{
		{"3", 3, false, false}, {"+2", 2, true, false}, {"-1", -1, true, false},
		{"0", 0, false, true}, {"x", 0, false, true}, {"", 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			n, rel, err := ParseScale(tt.arg)
			if (err != nil) != tt.bad || n != tt.n || rel != tt.relative {
				t.Errorf("ParseScale(%q) = %d, %v, %v; want %d, %v, error %v", tt.arg, n, rel, err, tt.n, tt.relative, tt.bad)
			}
		})
	}
}

func TestLineLoggerBoundsLines(t *testing.T) {
	var buf bytes.Buffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zap.InfoLevel))
	w := &lineLogger{log: log}
	w.Write([]byte("first\nsec"))
	w.Write([]byte("ond\n" + strings.Repeat("x", 3*maxLogLine)))
	w.Write([]byte("\n"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"line":"first"`) || !strings.Contains(lines[1], `"line":"second"`) {
		t.Fatalf("logged %q", lines)
	}
	if len(lines[2]) > maxLogLine+200 || !strings.Contains(lines[2], `"truncated":true`) {
		t.Errorf("long line logged as %d bytes, want at most ~%d and truncated", len(lines[2]), maxLogLine)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add("instances: max\nkill_timeout: 1.6s\n")
	f.Add("instances: -1\nmax_memory_restart: 1G\nenv: {A: b}\n")
	f.Add("listen: '[::1]:0'\ncommand: [a, b]\nmin_uptime: 1000\n")
	f.Add("{")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := ParseConfig(strings.NewReader(in))
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config that Validate refuses: %v", err)
		}
		if err := c.WithDefaults().Validate(); err != nil {
			t.Fatalf("defaults make an invalid config: %v", err)
		}
	})
}
