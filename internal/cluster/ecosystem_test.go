package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/proctest"
)

func TestParseEcosystem(t *testing.T) {
	const full = `{
  "apps": [{
    "name": "api",
    "script": "server.js",
    "args": "--port 3000 --verbose",
    "instances": "max",
    "exec_mode": "cluster",
    "wait_ready": true,
    "listen_timeout": 3000,
    "kill_timeout": 1600,
    "max_memory_restart": "300M",
    "min_uptime": "2s",
    "max_restarts": 10,
    "exp_backoff_restart_delay": 100,
    "merge_logs": true,
    "out_file": "/var/log/api.log",
    "error_file": "/var/log/api.log",
    "env": {"NODE_ENV": "development", "PORT": "3000"},
    "env_production": {"NODE_ENV": "production"}
  }]
}`
	apps, err := ParseEcosystem(strings.NewReader(full), "production")
	if err != nil {
		t.Fatal(err)
	}
	e := apps[0]
	c := e.Config
	if !slices.Equal(c.Command, []string{"node", "server.js", "--port", "3000", "--verbose"}) {
		t.Errorf("command %q", c.Command)
	}
	if c.Instances != InstancesMax || !c.waitReady() || c.ListenTimeout.D() != 3*time.Second ||
		c.KillTimeout.D() != 1600*time.Millisecond || c.MaxMemoryRestart != 300<<20 ||
		c.MinUptime.D() != 2*time.Second || c.MaxRestarts != 10 || c.ExpBackoffRestartDelay.D() != 100*time.Millisecond {
		t.Errorf("config %+v", c)
	}
	if c.Env["NODE_ENV"] != "production" || c.Env["PORT"] != "3000" {
		t.Errorf("env %v: want env_production merged over env", c.Env)
	}
	if c.Listen != "0.0.0.0:3000" {
		t.Errorf("listen %q, want the app's env.PORT on every interface, as its listen(PORT) under PM2", c.Listen)
	}
	if e.Name != "api" || e.LogFile != "/var/log/api.log" {
		t.Errorf("ecosystem %+v", e)
	}

	tests := []struct {
		name, doc, env string
		want           string // error substring; "" for none
		command        []string
	}{
		{"yaml", "apps:\n  - name: w\n    script: ./worker\n    instances: 2\n", "", "", []string{"./worker"}},
		{"python by extension", `{"apps":[{"script":"app.py"}]}`, "", "", []string{"python3", "app.py"}},
		{"interpreter", `{"apps":[{"script":"app.rb","interpreter":"ruby","args":["-w"]}]}`, "", "", []string{"ruby", "app.rb", "-w"}},
		{"interpreter none", `{"apps":[{"script":"./bin/app","interpreter":"none"}]}`, "", "", []string{"./bin/app"}},
		{"not a PM2 field", `{"apps":[{"script":"a.js","watchh":true}]}`, "", "apps[0].watchh: not a field of PM2's ecosystem file (did you mean watch?): fix its name or drop it", nil},
		{"refused: uid", `{"apps":[{"script":"a.js","uid":"www"}]}`, "", "apps[0].uid: not supported here: the workers run as the supervisor's user: run it as that user", nil},
		{"refused: autostart false", `{"apps":[{"script":"a.js","autostart":false}]}`, "", "apps[0].autostart: not supported here: every app of the file starts here", nil},
		{"refused: filter_env", `{"apps":[{"script":"a.js","filter_env":["SECRET"]}]}`, "", "apps[0].filter_env: not supported here: the workers get the supervisor's environment", nil},
		{"bad cron", `{"apps":[{"script":"a.js","cron_restart":"every day"}]}`, "", `apps[0]: cron_restart: "every day": 2 fields: want 5 fields`, nil},
		{"bad watch", `{"apps":[{"script":"a.js","watch":{"a":1}}]}`, "", "apps[0]: watch: not a watch value (line 1): write true", nil},
		{"node_args", `{"apps":[{"script":"a.js","node_args":"--max-old-space-size=4096 --trace-warnings","args":["x"]}]}`, "", "",
			[]string{"node", "--max-old-space-size=4096", "--trace-warnings", "a.js", "x"}},
		{"interpreter_args, a list", `{"apps":[{"script":"a.py","interpreter_args":["-u"]}]}`, "", "", []string{"python3", "-u", "a.py"}},
		{"node_args without an interpreter", `{"apps":[{"script":"./app","interpreter":"none","node_args":"--inspect"}]}`, "", "no interpreter to pass them to", nil},
		{"a directory: node", `{"apps":[{"script":"./service-worker/"}]}`, "", "", []string{"node", "./service-worker/"}},
		{"shell by extension", `{"apps":[{"script":"run.sh"}]}`, "", "", []string{"bash", "run.sh"}},
		{"exec, PM2's alias of script", `{"apps":[{"exec":"a.js"}]}`, "", "", []string{"node", "a.js"}},
		{"increment_var PORT in cluster mode", `{"apps":[{"script":"a.js","instances":2,"increment_var":"PORT","env":{"PORT":3000}}]}`, "", "increment_var: PORT in cluster mode", nil},
		{"increment_var not a number", `{"apps":[{"script":"a.js","exec_mode":"fork","increment_var":"N","env":{"N":"x"}}]}`, "", `env.N is "x", not a number`, nil},
		{"ignore_watch without watch", `{"apps":[{"script":"a.js","ignore_watch":["logs"]}]}`, "", "ignore_watch: given without watch", nil},
		{"log_file true", `{"apps":[{"script":"a.js","log_file":true}]}`, "", "apps[0].log_file: true: PM2's default log path", nil},
		{"unknown top-level key", `{"apps":[{"script":"a.js"}],"hosts":[]}`, "", "hosts: not read here", nil},
		{"two apps of one name", `{"apps":[{"script":"a.js"},{"script":"lib/a.mjs"}]}`, "", `apps[1].name: "a" is apps[0]'s name too`, nil},
		{"no apps", `{"apps":[]}`, "", "no app given", nil},
		{"bad duration", "{\"apps\":[{\"script\":\"a.js\",\n\"kill_timeout\":\"soon\"}]}", "", `apps[0]: kill_timeout: "soon" is not a duration (line 2): write a duration such as 5s`, nil},
		{"exec_mode unknown", `{"apps":[{"script":"a.js","exec_mode":"thread"}]}`, "", `apps[0].exec_mode: "thread": want cluster`, nil},
		{"name a number", `{"apps":[{"name":"7","script":"a.js"}]}`, "", `apps[0].name: "7": a name may not be a number`, nil},
		{"name with a slash", `{"apps":[{"name":"a/b","script":"a.js"}]}`, "", `apps[0].name: "a/b": want letters`, nil},
		{"no script", `{"apps":[{"name":"x"}]}`, "", "apps[0].script: missing", nil},
		{"missing env", `{"apps":[{"script":"a.js"}]}`, "staging", `env "staging": no app has env_staging`, nil},
		{"split logs", `{"apps":[{"script":"a.js","out_file":"o.log","error_file":"e.log"}]}`, "", "give out_file and error_file the same path", nil},
		{"per-instance logs", `{"apps":[{"script":"a.js","out_file":"o.log","merge_logs":false}]}`, "", "-log-dir DIR", nil},
		{"merge_logs unset", `{"apps":[{"script":"a.js","out_file":"o.log"}]}`, "", "apps[0].merge_logs: not set, and PM2 then writes one file per instance", nil},
		{"one merged file", `{"apps":[{"script":"a.js","out_file":"o.log","error_file":"o.log","merge_logs":true}]}`, "", "", []string{"node", "a.js"}},
		{"bad value", `{"apps":[{"script":"a.js","instances":"lots"}]}`, "", `instances: "lots" is out of range`, nil},
		{"env.HOST", `{"apps":[{"script":"a.js","instances":2,"env":{"PORT":8080,"HOST":"127.0.0.1"}}]}`, "", "", []string{"node", "a.js"}},
		{"env.PORT not a port", `{"apps":[{"script":"a.js","instances":2,"env":{"PORT":"http"}}]}`, "", `apps[0].env.PORT: "http": want a port number`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			apps, err := ParseEcosystem(strings.NewReader(tc.doc), tc.env)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c := apps[0].Config; !slices.Equal(c.Command, tc.command) {
				t.Errorf("command %q, want %q", c.Command, tc.command)
			}
		})
	}
}

// TestParseEcosystemApps: every app of the file, each its own cluster, in order, with
// PM2's names; fork-mode apps get no socket of ours (their PORT stays theirs); env_NAME
// applies where an app has it.
func TestParseEcosystemApps(t *testing.T) {
	const doc = `{"apps": [
  {"name": "api", "script": "api.js", "instances": 2, "env": {"PORT": 3000}, "env_production": {"NODE_ENV": "production"}},
  {"name": "admin", "script": "admin.js", "instances": 1, "exec_mode": "cluster_mode", "env": {"PORT": 3001, "HOST": "127.0.0.1"}},
  {"script": "./jobs/mailer.js", "exec_mode": "fork", "env": {"PORT": 3002}},
  {"name": "cron", "script": "./cron", "interpreter": "none", "exec_mode": "fork_mode", "instances": 2}
]}`
	apps, err := ParseEcosystem(strings.NewReader(doc), "production")
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		name, mode, listen string
		instances          Instances
		env                map[string]string
	}
	wants := []want{
		{"api", ExecCluster, "0.0.0.0:3000", 2, map[string]string{"PORT": "3000", "NODE_ENV": "production"}},
		{"admin", ExecCluster, "127.0.0.1:3001", 1, map[string]string{"PORT": "3001", "HOST": "127.0.0.1"}},
		{"mailer", ExecFork, "", InstancesMax, map[string]string{"PORT": "3002"}},
		{"cron", ExecFork, "", 2, nil},
	}
	if len(apps) != len(wants) {
		t.Fatalf("%d apps, want %d", len(apps), len(wants))
	}
	for i, w := range wants {
		a := apps[i]
		if a.Name != w.name || a.Config.ExecMode != w.mode || a.Config.Listen != w.listen || a.Config.Instances != w.instances {
			t.Errorf("apps[%d] = %s %q listen %q instances %d, want %+v", i, a.Name, a.Config.ExecMode, a.Config.Listen, a.Config.Instances, w)
		}
		if len(a.Config.Env) != len(w.env) {
			t.Errorf("apps[%d] env %v, want %v", i, a.Config.Env, w.env)
		}
		for k, v := range w.env {
			if a.Config.Env[k] != v {
				t.Errorf("apps[%d] env %v, want %v", i, a.Config.Env, w.env)
			}
		}
	}
	if d := apps[2].Config.WithDefaults(); d.Instances.Count() != 1 || d.Listen != "" {
		t.Errorf("fork app defaults: instances %d listen %q, want 1 process and no socket", d.Instances.Count(), d.Listen)
	}
}

// TestLoadEcosystemJavaScript evaluates .config.js, .cjs and .mjs files with the real node,
// as PM2 requires them; functions are dropped, node's errors shown.
func TestLoadEcosystemJavaScript(t *testing.T) {
	proctest.Need(t, "node")
	seed := `module.exports = {
  apps: [
    {
      name: 'cpeak-cluster',
      script: './cpeak.js',
      instances: 'max', // Spawns one worker process per available CPU core
      exec_mode: 'cluster', // Enables clustering
      env: {
        NODE_ENV: 'production',
        PORT: 3000
      }
    }
  ]
};
`
	tests := []struct {
		name, file, src string
		want            string // error substring; "" for none
	}{
		{"seed", "ecosystem.config.js", seed, ""},
		{"cjs with a function", "ecosystem.config.cjs", "const port = 3000; module.exports = {apps: [{name: 'cpeak-cluster', script: './cpeak.js', instances: 'max', exec_mode: 'cluster', env: {NODE_ENV: 'production', PORT: port}, post_update: undefined, hook() {}}]}", ""},
		{"mjs", "ecosystem.config.mjs", "export default {apps: [{name: 'cpeak-cluster', script: './cpeak.js', instances: 'max', exec_mode: 'cluster', env: {NODE_ENV: 'production', PORT: 3000}}]}", ""},
		{"esm in a .js", "ecosystem.config.js", "export default {apps: [{name: 'cpeak-cluster', script: './cpeak.js', instances: 'max', exec_mode: 'cluster', env: {NODE_ENV: 'production', PORT: 3000}}]}", ""},
		{"syntax error", "ecosystem.config.js", "module.exports = {apps: [", "SyntaxError"},
		{"throws", "ecosystem.config.js", "throw new Error('no config for you')", "no config for you"},
		{"exports nothing", "ecosystem.config.js", "", "apps: no app given"},
		{"unknown field named", "ecosystem.config.js", "module.exports = {apps: [{script: 'a.js', wacth: true}]}", "apps[0].wacth: not a field of PM2's ecosystem file (did you mean watch?)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), tc.file)
			os.WriteFile(p, []byte(tc.src), 0o600)
			if !IsEcosystem(p) {
				t.Errorf("IsEcosystem(%s) = false", tc.file)
			}
			apps, err := LoadEcosystem(p, "")
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("LoadEcosystem = %v, want an error with %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			e := apps[0]
			c := e.Config
			if e.Name != "cpeak-cluster" || c.Instances != InstancesMax || !slices.Equal(c.Command, []string{"node", "./cpeak.js"}) ||
				c.Env["PORT"] != "3000" || c.Env["NODE_ENV"] != "production" || c.Listen != "0.0.0.0:3000" {
				t.Errorf("got %+v %+v, want the seed's app", c, e)
			}
		})
	}
}

// TestLoadEcosystemJavaScriptNoNode: without node on PATH the error says so and how to
// convert the file.
func TestLoadEcosystemJavaScriptNoNode(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // a directory without node
	p := filepath.Join(t.TempDir(), "ecosystem.config.js")
	os.WriteFile(p, []byte("module.exports = {apps: [{script: 'a.js'}]}"), 0o600)
	_, err := LoadEcosystem(p, "")
	if err == nil || !strings.Contains(err.Error(), "no node is on PATH") || !strings.Contains(err.Error(), "JSON.stringify(require(") {
		t.Fatalf("LoadEcosystem(.js) = %v, want no node named and the way to JSON", err)
	}
	y := filepath.Join(t.TempDir(), "cluster.yaml")
	os.WriteFile(y, []byte("instances: 2\n"), 0o600)
	if IsEcosystem(y) {
		t.Error("IsEcosystem(our YAML) = true")
	}
}

func FuzzParseEcosystem(f *testing.F) {
	f.Add(`{"apps":[{"script":"a.js","instances":2,"env":{"A":"1"},"env_prod":{"A":"2"}}]}`, "prod")
	f.Add("apps:\n  - script: x\n    args: [a, b]\n", "")
	f.Add(`{"apps":[{"script":"a.js","out_file":"o","error_file":"o"}]}`, "")
	f.Fuzz(func(t *testing.T, doc, env string) {
		apps, err := ParseEcosystem(strings.NewReader(doc), env)
		if err != nil {
			return
		}
		names := map[string]bool{}
		for _, a := range apps {
			c := a.Config
			if len(c.Command) == 0 || c.Command[0] == "" {
				t.Fatalf("accepted %q with command %q", doc, c.Command)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("accepted %q that does not validate: %v", doc, err)
			}
			if checkAppName(a.Name) != nil || names[a.Name] {
				t.Fatalf("accepted %q with app name %q (bad or repeated)", doc, a.Name)
			}
			names[a.Name] = true
		}
	})
}

// TestPM2Fields: every field of PM2's ecosystem file is known; at PM2's default none is
// refused or warned about; the ones that act here reach the Config; the ones that mean
// nothing here are warned about when set otherwise.
func TestPM2Fields(t *testing.T) {
	const defaults = `{"apps": [{
  "name": "api", "script": "api.js", "autorestart": true, "watch": false, "time": false, "merge_logs": false,
  "instance_var": "NODE_APP_INSTANCE", "treekill": true, "vizion": true, "autostart": true, "pmx": true, "automation": true,
  "windowsHide": true, "filter_env": false, "disable_logs": false, "append_env_to_name": false, "trace": false,
  "source_map_support": true, "force": false, "kill_retry_time": 100, "uid": null, "pid_file": null
}]}`
	apps, err := ParseEcosystem(strings.NewReader(defaults), "")
	if err != nil {
		t.Fatalf("PM2's defaults refused: %v", err)
	}
	if w := apps[0].Warnings; len(w) != 0 {
		t.Errorf("warnings at PM2's defaults: %q", w)
	}
	if c := apps[0].Config; c.ExecMode != ExecFork || len(c.Watch) != 0 || c.LogDateFormat != "" || !c.autoRestart() {
		t.Errorf("config %+v: want fork mode (PM2's default without instances), no watch, no stamp, autorestart", c)
	}

	const taken = `{"apps": [{
  "name": "api", "script": "api.js", "exec_mode": "fork", "instances": 2, "autorestart": false, "stop_exit_codes": 0,
  "watch": ["src", "config"], "ignore_watch": ["logs", "*.tmp"], "watch_delay": 500, "cron": "0 3 * * *",
  "instance_var": "INSTANCE_ID", "increment_var": "PORT", "port": 4000, "time": true,
  "trace": true, "namespace": "shop", "watch_options": {"usePolling": true}
}], "deploy": {"production": {"user": "u", "host": "h"}}}`
	apps, err = ParseEcosystem(strings.NewReader(taken), "")
	if err != nil {
		t.Fatal(err)
	}
	c := apps[0].Config
	if c.autoRestart() || !slices.Equal(c.StopExitCodes, []int{0}) || !slices.Equal(c.Watch, WatchPaths{"src", "config"}) ||
		!slices.Equal(c.IgnoreWatch, []string{"logs", "*.tmp"}) || c.WatchDelay.D() != 500*time.Millisecond || c.CronRestart != "0 3 * * *" ||
		c.InstanceVar != "INSTANCE_ID" || c.IncrementVar != "PORT" || c.Env["PORT"] != "4000" || c.LogDateFormat != DefaultLogDateFormat {
		t.Errorf("config %+v", c)
	}
	warned := strings.Join(apps[0].Warnings, "\n")
	for _, want := range []string{"deploy: ignored: this supervisor deploys nothing", "docs/fleet.md", "apps[0].trace: ignored: PM2 Plus",
		"apps[0].namespace: ignored", "apps[0].watch_options: ignored"} {
		if !strings.Contains(warned, want) {
			t.Errorf("warnings %q lack %q", warned, want)
		}
	}

	// watch: true is the app's directory; a string one path; log_date_format beats time.
	apps, err = ParseEcosystem(strings.NewReader(`{"apps": [{"script": "a.js", "watch": true, "time": true, "log_date_format": "HH:mm"}, {"script": "b.js", "watch": "lib"}]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := apps[0].Config, apps[1].Config; !slices.Equal(a.Watch, WatchPaths{"."}) || a.LogDateFormat != "HH:mm" || !slices.Equal(b.Watch, WatchPaths{"lib"}) {
		t.Errorf("watch %q format %q, watch %q", a.Watch, a.LogDateFormat, b.Watch)
	}
}

// TestPM2SchemaKnown: every app field of PM2 7's schema (lib/API/schema.json, aliases
// included) is known here: taken, ignored or refused with a reason, never "unknown".
func TestPM2SchemaKnown(t *testing.T) {
	schema := strings.Fields(`script exec name name_prefix filter_env namespace install_url cwd args exec_interpreter interpreter
node_args interpreterArgs interpreter_args out_file out output out_log error_file error err err_file err_log log_file log
disable_logs log_type log_date_format time env max_memory_restart pid_file pid restart_delay exp_backoff_restart_delay
source_map_support disable_source_map_support wait_ready instances kill_timeout shutdown_with_message listen_timeout
cron_restart cron merge_logs combine_logs vizion autostart autorestart stop_exit_codes watch_delay watch ignore_watch
watch_options min_uptime max_restarts execute_command exec_mode force append_env_to_name post_update trace disable_trace
v8 event_loop_inspector deep_monitoring increment_var instance_var pmx automation treekill port username uid user gid
windowsHide kill_retry_time write io kill_signal`)
	for _, k := range schema {
		f, ok := pm2Fields[k]
		if !ok {
			t.Errorf("%s: unknown", k)
			continue
		}
		if (f.kind == fieldWarned || f.kind == fieldRefused) && f.why == "" {
			t.Errorf("%s: ignored or refused without saying why", k)
		}
	}
}

// TestPM2Templates: the files PM2 7 writes (`pm2 init simple`, `pm2 ecosystem`), as they
// are, read as PM2 runs them: fork mode (no instances), node by extension or for a
// directory, watch on, the deploy block ignored with a pointer to how hosts are rolled here.
func TestPM2Templates(t *testing.T) {
	proctest.Need(t, "node") // the templates are JavaScript
	type want struct {
		name    string
		command []string
		watch   WatchPaths
	}
	for _, tc := range []struct {
		dir     string
		apps    []want
		warning string
	}{
		{"init-simple", []want{{"app1", []string{"node", "./app.js"}, nil}}, ""},
		{"ecosystem", []want{{"index", []string{"node", "index.js"}, WatchPaths{"."}},
			{"service-worker", []string{"node", "./service-worker/"}, WatchPaths{"./service-worker"}}}, "deploy: ignored"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			apps, err := LoadEcosystem(filepath.Join("testdata", "pm2", tc.dir, "ecosystem.config.js"), "")
			if err != nil {
				t.Fatal(err)
			}
			if len(apps) != len(tc.apps) {
				t.Fatalf("%d apps, want %d", len(apps), len(tc.apps))
			}
			for i, w := range tc.apps {
				c := apps[i].Config
				if apps[i].Name != w.name || !slices.Equal(c.Command, w.command) || !slices.Equal(c.Watch, w.watch) || c.ExecMode != ExecFork {
					t.Errorf("apps[%d] = %s %q watch %q mode %s, want %+v in fork mode", i, apps[i].Name, c.Command, c.Watch, c.ExecMode, w)
				}
			}
			if got := strings.Join(apps[0].Warnings, "\n"); !strings.Contains(got, tc.warning) || (tc.warning == "" && got != "") {
				t.Errorf("warnings %q, want %q", got, tc.warning)
			}
		})
	}
}
