package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/systemd"
)

// runStartup is `supervisor startup`, PM2's `pm2 startup` for systemd: it prints a unit
// that runs `supervisor run -config FILE` at boot, hardened as configs/onehost.service is,
// and the two commands that install and start it. It installs nothing itself: the
// commands need root, and a user reads what they run as root first.
//
// Unlike pm2 startup it needs no `pm2 save`: the unit names the configuration file, which
// is the process list.
//
// The unit runs what `supervisor run -config FILE` runs where startup is typed: that
// directory is its WorkingDirectory (the config's relative paths resolve there, as
// internal/cluster starts workers in the supervisor's directory), the shell's PATH is its
// PATH (nvm's node), the -env-file is its EnvironmentFile= (the workers' environment: the
// feed worker's SQLITE_PATH and JWT_SECRET_FILE), the app's and the database's directories
// are its ReadWritePaths=, and its ExecStartPre= is `run -check`, which refuses what would
// crash-loop (startcheck.go). What it can see would fail now (a missing variable, program,
// directory; an app under the private /tmp) is said on stderr; the unit is printed anyway,
// since the env file may be written after it.
func runStartup(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s, err := parseStartupFlags(args, stderr)
	if err != nil {
		return err
	}
	if err := s.resolve(); err != nil {
		return err
	}
	if err := s.readEnvFile(); err != nil {
		return err
	}
	s.environment(getenv)
	s.checkLaunch()
	s.writablePaths()
	if err := s.checkQuoting(); err != nil {
		return err
	}
	return s.print(stdout)
}

// startupUnit is what runStartup's steps learn about the unit, in their order.
type startupUnit struct {
	stderr io.Writer
	// the flags, then made absolute and defaulted by resolve and readEnvFile
	configPath, name, userName, dir, envFile, envName string

	cfg, bin, ours string // resolve
	specs          []cluster.App
	me             *user.User
	meErr          error
	fileEnv        []string            // readEnvFile
	pathDirs       []string            // environment
	unitPath       string              // the unit's PATH
	unitEnv        func(string) string // the environment the workers get
	rw, seen       []string            // writablePaths: ReadWritePaths=, and the files the service reads or writes
}

func parseStartupFlags(args []string, stderr io.Writer) (*startupUnit, error) {
	s := &startupUnit{stderr: stderr}
	fs := flag.NewFlagSet("supervisor startup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.configPath, "config", defaultConfig, "the configuration the unit runs (our YAML or a PM2 ecosystem file); made absolute")
	fs.StringVar(&s.name, "name", "", "the unit's name, also its runtime directory /run/NAME with the control socket (default: the only app's name, else the file's name without extensions; for ecosystem.* its directory's name)")
	fs.StringVar(&s.userName, "user", "", "the user the service runs as (default: the current user)")
	fs.StringVar(&s.dir, "dir", "", "the unit's WorkingDirectory, where the configuration's relative paths (command, script, cwd, the env's paths) resolve, as they do for `supervisor run` (default: the current directory)")
	fs.StringVar(&s.envFile, "env-file", "", "a file of KEY=VALUE lines (mode 0600: it may hold secrets) the unit reads with EnvironmentFile=; the workers inherit them (the feed worker: SQLITE_PATH and JWT_SECRET_FILE)")
	fs.StringVar(&s.envName, "env", "", "with an ecosystem file: the unit runs with -env NAME (pm2 start --env NAME)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("startup: unexpected argument %q", fs.Arg(0))
	}
	return s, nil
}

func (s *startupUnit) warn(format string, a ...any) {
	fmt.Fprintf(s.stderr, "supervisor startup: warning: "+format+"\n", a...)
}

// resolve makes the paths absolute, loads the apps and fills in the defaults.
func (s *startupUnit) resolve() error {
	cfg, err := filepath.Abs(s.configPath)
	if err != nil {
		return fmt.Errorf("startup: config path: %w", err)
	}
	if _, err := os.Stat(cfg); err != nil {
		return fmt.Errorf("startup: config: %w", err)
	}
	s.cfg = cfg
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("startup: find the supervisor binary: %w", err)
	}
	if bin, err = filepath.EvalSymlinks(bin); err != nil {
		return fmt.Errorf("startup: find the supervisor binary: %w", err)
	}
	s.bin = bin
	if s.dir == "" {
		// internal/cluster starts the workers in the supervisor's directory, so a config's
		// relative paths mean what they mean where `supervisor run` is typed: here.
		if s.dir, err = os.Getwd(); err != nil {
			return fmt.Errorf("startup: working directory: %w (give -dir)", err)
		}
	}
	if s.dir, err = filepath.Abs(s.dir); err != nil {
		return fmt.Errorf("startup: -dir: %w", err)
	}
	if s.envName != "" && !validEnvName(s.envName) {
		return fmt.Errorf("startup: -env %q: want the NAME of an env_NAME of the ecosystem file", s.envName)
	}
	s.ours = filepath.Join(filepath.Dir(bin), "worker")
	if s.specs, err = loadUnitSpecs(cfg, s.envName, s.ours); err != nil {
		return fmt.Errorf("startup: %w", err)
	}
	if s.name == "" {
		s.name = defaultUnitName(cfg, s.specs)
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`).MatchString(s.name) {
		return fmt.Errorf("startup: -name %q: want letters, digits, '_', '.' or '-' (a unit name)", s.name)
	}
	s.me, s.meErr = user.Current()
	if s.userName == "" {
		if s.meErr != nil {
			return fmt.Errorf("startup: current user: %w (give -user)", s.meErr)
		}
		s.userName = s.me.Username
	}
	if !validUnitUser.MatchString(s.userName) {
		return fmt.Errorf("startup: -user %q: want a user name (a letter or '_' first, then letters, digits, '_', '.' or '-', 32 at most) or a numeric uid", s.userName)
	}
	return nil
}

// readEnvFile reads -env-file, warning of one missing yet or readable by others.
func (s *startupUnit) readEnvFile() error {
	if s.envFile == "" {
		return nil
	}
	var err error
	if s.envFile, err = filepath.Abs(s.envFile); err != nil {
		return fmt.Errorf("startup: -env-file: %w", err)
	}
	fi, err := os.Stat(s.envFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.warn("-env-file %s does not exist yet: systemd will not start the unit without it; write it (KEY=VALUE lines, chmod 600)", s.envFile)
	case err != nil:
		return fmt.Errorf("startup: -env-file: %w", err)
	default:
		if s.fileEnv, err = systemd.ReadEnvFile(s.envFile); err != nil {
			return fmt.Errorf("startup: %w", err)
		}
		for _, kv := range s.fileEnv {
			k, _, _ := strings.Cut(kv, "=")
			if fi.Mode().Perm()&0o077 != 0 && !strings.HasSuffix(k, "_FILE") && regexp.MustCompile(`SECRET|PASSWORD|TOKEN|KEY`).MatchString(k) {
				s.warn("-env-file %s holds %s and has mode %04o: others may read it; chmod 600 %s", s.envFile, k, fi.Mode().Perm(), s.envFile)
			}
		}
	}
	return nil
}

// environment is the unit's: the generating shell's PATH, so that the node (nvm's),
// python or bun the user runs is the one the service finds (relative entries would mean
// the unit's directory), under the env file's.
func (s *startupUnit) environment(getenv func(string) string) {
	for _, d := range filepath.SplitList(getenv("PATH")) {
		if filepath.IsAbs(d) {
			if !slices.Contains(s.pathDirs, d) {
				s.pathDirs = append(s.pathDirs, d)
			}
		} else {
			s.warn("PATH entry %q is not absolute: left out of the unit", d)
		}
	}
	unitPath := strings.Join(s.pathDirs, ":")
	s.unitPath = unitPath
	s.unitEnv = overEnv(s.fileEnv, func(k string) string {
		if k == "PATH" {
			return unitPath
		}
		return "" // systemd gives a service little else (HOME, USER: not the workers' concern)
	})
}

// checkLaunch warns of what would make the unit crash-loop, judged from its directory in
// its environment. Permissions only when this user is the service's (else access(2) asks
// the wrong one).
func (s *startupUnit) checkLaunch() {
	lc := launchCheck{Dir: s.dir, Getenv: s.unitEnv, Ours: s.ours, Access: s.meErr == nil && s.me.Username == s.userName, Config: s.cfg}
	if err := lc.check(s.specs); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			s.warn("the unit would not start: %s", line)
		}
		ef := ""
		if s.envFile != "" {
			ef = " -env-file " + s.envFile
		}
		if s.envName != "" {
			ef += " -env " + s.envName
		}
		s.warn("fix these, then check again with: cd %s && %s run -check -config %s%s (the unit runs the same check before it starts)", s.dir, s.bin, s.cfg, ef)
	}
}

// writablePaths finds where the service writes: the app's directory (and each app's cwd),
// the database's directory (SQLite makes its WAL and shared-memory files beside it), log
// files'; and warns of those missing or under the unit's private /tmp.
func (s *startupUnit) writablePaths() {
	var rw, seen []string
	for _, sp := range s.specs {
		wd := s.dir
		if sp.Config.Cwd != "" {
			wd = abs(s.dir, sp.Config.Cwd)
		}
		getenv := func(k string) string {
			if v, ok := sp.Config.Env[k]; ok {
				return v
			}
			return s.unitEnv(k)
		}
		rw = append(rw, wd)
		seen = append(seen, wd)
		if db := getenv("SQLITE_PATH"); db != "" {
			rw = append(rw, filepath.Dir(abs(wd, db)))
			seen = append(seen, abs(wd, db))
		}
		if f := getenv("JWT_SECRET_FILE"); f != "" {
			seen = append(seen, abs(wd, f))
		}
		if sp.LogFile != "" {
			rw = append(rw, filepath.Dir(abs(s.dir, sp.LogFile)))
			seen = append(seen, abs(s.dir, sp.LogFile))
		}
	}
	rw = writablePaths(rw, s.name)
	for _, p := range rw {
		if _, err := os.Stat(p); err != nil {
			s.warn("ReadWritePaths=%s does not exist: systemd will not start the unit until it does; create it", p)
		}
	}
	for _, p := range append([]string{s.dir, s.cfg, s.bin}, seen...) {
		for _, tmp := range []string{"/tmp", "/var/tmp"} {
			if under(p, tmp) {
				s.warn("%s is under %s, and the unit's PrivateTmp=yes gives the service an empty %s of its own: it would not find it; move it (say to /srv/%s), or delete PrivateTmp=yes from the unit",
					p, tmp, tmp, s.name)
			}
		}
	}
	s.rw, s.seen = rw, seen
}

// checkQuoting refuses what the unit cannot carry as it is: paths a unit's command line
// would have to quote (or systemd would expand: '%' specifiers, '$' variables), and in any
// value printed into the unit (the paths, the user, PATH's entries) a control character:
// systemd ends a line at a carriage return as at a newline, so a CR in a configuration's
// cwd would end ReadWritePaths= and start a line of the config's author's choosing
// (User=root, ExecStartPre=+...).
func (s *startupUnit) checkQuoting() error {
	for _, p := range append([]string{s.bin, s.cfg, s.dir, s.envFile}, s.rw...) {
		if i := controlByte(p); i >= 0 {
			return fmt.Errorf("startup: path %q: byte %#02x at %d is a control character, which would end or bend the unit's line: rename it", p, p[i], i)
		}
		if strings.ContainsAny(p, " \t\n\"'\\%$") {
			return fmt.Errorf("startup: path %q: a unit's command line would need quoting: choose a path without spaces, quotes, '%%' or '$'", p)
		}
	}
	for _, d := range s.pathDirs {
		if i := controlByte(d); i >= 0 {
			return fmt.Errorf("startup: PATH entry %q: byte %#02x at %d is a control character, which would end the unit's Environment= line: take it out of PATH", d, d[i], i)
		}
	}
	return nil
}

// controlByte is the index of the first C0 control byte or DEL in s, -1 if none.
func controlByte(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return i
		}
	}
	return -1
}

// validUnitUser matches what User= takes: a user name as useradd makes them (a letter or
// '_' first; letters, digits, '_', '.' and '-'; 32 at most) or a numeric uid.
var validUnitUser = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.-]{0,31}|[0-9]{1,10})$`)

// print prints the unit and the commands that install it.
func (s *startupUnit) print(stdout io.Writer) error {
	u := unitParams{Name: s.name, Bin: s.bin, Config: s.cfg, User: s.userName, Dir: s.dir,
		Socket: "/run/" + s.name + "/supervisor.sock", EnvFile: s.envFile, ReadWrite: s.rw,
		// ProtectHome=yes would hide a working directory under /home: read-only keeps it
		// visible (ReadWritePaths= under it stay writable).
		ProtectHome: "yes"}
	if s.unitPath != "" {
		u.Path = `"PATH=` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%").Replace(s.unitPath) + `"`
	}
	if s.envName != "" {
		u.EnvArg = " -env " + s.envName
	}
	for _, p := range append(append(append([]string{s.cfg, s.dir, s.bin}, s.rw...), s.seen...), s.pathDirs...) {
		if under(p, "/home") || under(p, "/root") || under(p, "/run/user") {
			u.ProtectHome = "read-only"
		}
	}
	if err := unitTemplate.Execute(stdout, u); err != nil {
		return err
	}
	flags := fmt.Sprintf("-config %s -name %s -user %s -dir %s", s.cfg, u.Name, u.User, u.Dir)
	if s.envFile != "" {
		flags += " -env-file " + s.envFile
	}
	flags += u.EnvArg
	fmt.Fprintf(stdout, "\n# To install and start it at boot (as pm2 startup), run:\n"+
		"#   %s startup %s | sudo tee /etc/systemd/system/%s.service >/dev/null\n"+
		"#   sudo systemctl daemon-reload && sudo systemctl enable --now %s\n"+
		"# then: systemctl reload %s (rolling reload), journalctl -u %s (logs), supervisor status\n"+
		"# (without -socket, the commands find %s when no other supervisor runs)\n",
		s.bin, flags, u.Name, u.Name, u.Name, u.Name, u.Socket)
	return nil
}

// loadUnitSpecs reads the apps of the configuration as `run -config path` does (without
// the command line's overrides, which a unit has none of): the default command is ours.
func loadUnitSpecs(path, envName, ours string) ([]cluster.App, error) {
	var specs []cluster.App
	if cluster.IsEcosystem(path) {
		apps, err := cluster.LoadEcosystem(path, envName)
		if err != nil {
			return nil, err
		}
		specs = apps
	} else {
		if envName != "" {
			return nil, fmt.Errorf("env: %q applies to a PM2 ecosystem file, and -config %q is not one", envName, path)
		}
		c, err := cluster.LoadConfig(path)
		if err != nil {
			return nil, err
		}
		specs = []cluster.App{{Config: c}}
	}
	for i := range specs {
		if len(specs[i].Config.Command) == 0 {
			specs[i].Config.Command = []string{ours}
		}
	}
	return specs, nil
}

// defaultUnitName names the unit after what it runs: the only app's name, else the file's
// name up to its first dot (cluster for cluster.yaml), except PM2's everywhere-the-same
// ecosystem.config.js, named after its directory (the project), so that two projects'
// units do not both become `ecosystem`.
func defaultUnitName(cfg string, specs []cluster.App) string {
	if len(specs) == 1 && specs[0].Name != "" {
		return specs[0].Name
	}
	n := strings.SplitN(filepath.Base(cfg), ".", 2)[0]
	if n == "ecosystem" || n == "" {
		n = filepath.Base(filepath.Dir(cfg))
	}
	n = regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(n, "-")
	if n = strings.TrimLeft(n, "-."); n == "" {
		n = "onehost"
	}
	return n
}

// writablePaths is the ReadWritePaths= list: sorted, each once, none under another in the
// list, and none the unit may write anyway (its state, logs and runtime directories).
func writablePaths(ps []string, name string) []string {
	slices.Sort(ps)
	var out []string
	for _, p := range slices.Compact(ps) {
		if slices.ContainsFunc(out, func(q string) bool { return under(p, q) }) ||
			under(p, "/var/lib/"+name) || under(p, "/var/log/"+name) || under(p, "/run/"+name) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

type unitParams struct {
	Name, Bin, Config, User, Dir, Socket, ProtectHome string
	// Path is Environment='s quoted "PATH=..." ("" for none), EnvFile EnvironmentFile='s,
	// EnvArg " -env NAME" or "", ReadWrite what ReadWritePaths= adds.
	Path, EnvFile, EnvArg string
	ReadWrite             []string
}

// unitTemplate is configs/onehost.service without what is the feed API's own (the
// database path, the JWT credential, CAP_BPF): without CAP_BPF the supervisor steers with
// the kernel's hash and says so. MemoryDenyWriteExecute is left out because Node's JIT
// needs memory both writable and executable, and PM2 users run Node.
var unitTemplate = template.Must(template.New("unit").Parse(`# systemd unit printed by ` + "`supervisor startup`" + ` (pm2 startup): the supervisor in the
# foreground, running every app of {{.Config}}.
[Unit]
Description=onehost supervisor for {{.Config}}
Documentation=https://github.com/onehost/onehost/blob/main/docs/supervisor.md
After=network.target

[Service]
Type=notify
NotifyAccess=main
WatchdogSec=30s
# The same checks as ` + "`supervisor run -check`" + `, in the service's own environment and sandbox: a
# missing variable, program or directory fails the start with its reason in
# ` + "`systemctl status`" + `, instead of workers restarting until their slots are errored.
ExecStartPre={{.Bin}} run -check -config {{.Config}}{{.EnvArg}} -socket {{.Socket}}
ExecStart={{.Bin}} run -config {{.Config}}{{.EnvArg}} -socket {{.Socket}}
ExecReload={{.Bin}} reload -socket {{.Socket}}
# process, not mixed: the workers outlive a crashed supervisor, and the next one adopts them.
KillMode=process
KillSignal=SIGTERM
TimeoutStopSec=30
TimeoutStartSec=120
Restart=on-failure
RestartSec=1
FileDescriptorStoreMax=1024
LimitNOFILE=65535

User={{.User}}
# Where the configuration's relative paths resolve, as for ` + "`supervisor run`" + ` typed there.
WorkingDirectory={{.Dir}}
{{- if .Path}}
# The PATH of the shell that printed this unit (node, python, bun as you run them).
Environment={{.Path}}
{{- end}}
{{- if .EnvFile}}
# The workers' environment (they inherit the supervisor's); its variables win over the
# line above. Mode 0600: it may hold secrets.
EnvironmentFile={{.EnvFile}}
{{- end}}
# The only places the service may write under ProtectSystem=strict: /var/lib/{{.Name}},
# /var/log/{{.Name}} (for -log-dir or -log-file), /run/{{.Name}} (the control socket), and
# the app's directory and its database's (SQLite writes its WAL beside the file).
{{- range .ReadWrite}}
ReadWritePaths={{.}}
{{- end}}
StateDirectory={{.Name}}
StateDirectoryMode=0700
LogsDirectory={{.Name}}
LogsDirectoryMode=0750
RuntimeDirectory={{.Name}}
RuntimeDirectoryMode=0700
RuntimeDirectoryPreserve=restart

# Hardening, as configs/onehost.service (docs/supervisor.md, "systemd").
CapabilityBoundingSet=
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome={{.ProtectHome}}
PrivateTmp=yes
PrivateMounts=yes
PrivateDevices=yes
DevicePolicy=closed
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RemoveIPC=yes
KeyringMode=private
UMask=0077
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
`))
