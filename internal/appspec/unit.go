package appspec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/fleetspec"
	"github.com/onehost/onehost/internal/systemd"
)

// UnitRequest is what `supervisor startup` is asked for: the unit of a configuration run
// from a directory, as `supervisor run -config FILE` typed there would run it.
type UnitRequest struct {
	// Config is the configuration the unit runs; EnvName its ecosystem env_NAME.
	Config, EnvName string
	// Name is the unit's ("" after the app or the file), User the service's ("" this
	// process's), Dir its WorkingDirectory ("" this process's), EnvFile its
	// EnvironmentFile= ("" none).
	Name, User, Dir, EnvFile string
	// Bin is the supervisor binary the unit runs (its real path).
	Bin string
	// Getenv is the environment startup is typed in (its PATH becomes the unit's).
	Getenv func(string) string
	// Warnings hears what would fail now, one line each; the unit is made anyway, since an
	// env file may be written after it.
	Warnings io.Writer
}

// PlanUnit makes the unit of req, with every value it prints checked (no control
// character can end one of its lines), and says on req.Warnings what would keep it from
// starting as things are.
func PlanUnit(req UnitRequest) (systemd.Unit, error) {
	s := &startupUnit{stderr: req.Warnings, configPath: req.Config, name: req.Name, userName: req.User, dir: req.Dir,
		envFile: req.EnvFile, envName: req.EnvName, bin: req.Bin}
	if err := s.resolve(); err != nil {
		return systemd.Unit{}, err
	}
	if err := s.readEnvFile(); err != nil {
		return systemd.Unit{}, err
	}
	s.environment(req.Getenv)
	s.checkLaunch()
	s.writablePaths()
	if err := s.checkQuoting(); err != nil {
		return systemd.Unit{}, err
	}
	return s.unit(), nil
}

// startupUnit is what PlanUnit's steps learn about the unit, in their order.
type startupUnit struct {
	stderr io.Writer
	// the request, then made absolute and defaulted by resolve and readEnvFile
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
	if s.envName != "" && !systemd.ValidEnvName(s.envName) {
		return fmt.Errorf("startup: -env %q: want the NAME of an env_NAME of the ecosystem file", s.envName)
	}
	s.ours = filepath.Join(filepath.Dir(s.bin), "worker")
	src := Source{Path: cfg, EnvName: s.envName, Ours: s.ours, LogNode: filepath.Join(filepath.Dir(s.bin), "lognode")}
	if s.specs, err = src.Load(); err != nil {
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
	if !systemd.ValidUser(s.userName) {
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
	s.unitEnv = OverEnv(s.fileEnv, func(k string) string {
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
	// The unit's environment as lines: its PATH and its EnvironmentFile='s variables.
	environ := append([]string{"PATH=" + s.unitPath}, s.fileEnv...)
	lc := LaunchCheck{Dir: s.dir, Getenv: s.unitEnv, Environ: environ, Ours: s.ours,
		Access: s.meErr == nil && s.me.Username == s.userName, Config: s.cfg}
	if err := lc.Check(s.specs); err != nil {
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
// files', a fleet host's write log (-fleet-dir); and warns of those missing or under the
// unit's private /tmp.
func (s *startupUnit) writablePaths() {
	var rw, seen []string
	for _, sp := range s.specs {
		wd := s.dir
		if sp.Config.Cwd != "" {
			wd = Abs(s.dir, sp.Config.Cwd)
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
			rw = append(rw, filepath.Dir(Abs(wd, db)))
			seen = append(seen, Abs(wd, db))
		}
		if f := getenv("JWT_SECRET_FILE"); f != "" {
			seen = append(seen, Abs(wd, f))
		}
		if d := getenv(fleetspec.EnvDir); d != "" { // a fleet host's copy of the write log
			rw = append(rw, Abs(wd, d))
			seen = append(seen, Abs(wd, d))
		}
		if sp.LogFile != "" {
			rw = append(rw, filepath.Dir(Abs(s.dir, sp.LogFile)))
			seen = append(seen, Abs(s.dir, sp.LogFile))
		}
	}
	rw = systemd.WritablePaths(rw, s.name)
	for _, p := range rw {
		if _, err := os.Stat(p); err != nil {
			s.warn("ReadWritePaths=%s does not exist: systemd will not start the unit until it does; create it", p)
		}
	}
	// Each path once: the app's directory is the unit's too, and was said twice.
	var said []string
	for _, p := range append([]string{s.dir, s.cfg, s.bin}, seen...) {
		for _, tmp := range []string{"/tmp", "/var/tmp"} {
			if systemd.Under(p, tmp) && !slices.Contains(said, p) {
				said = append(said, p)
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
		if i := systemd.ControlByte(p); i >= 0 {
			return fmt.Errorf("startup: path %q: byte %#02x at %d is a control character, which would end or bend the unit's line: rename it", p, p[i], i)
		}
		if strings.ContainsAny(p, " \t\n\"'\\%$") {
			return fmt.Errorf("startup: path %q: a unit's command line would need quoting: choose a path without spaces, quotes, '%%' or '$'", p)
		}
	}
	for _, d := range s.pathDirs {
		if i := systemd.ControlByte(d); i >= 0 {
			return fmt.Errorf("startup: PATH entry %q: byte %#02x at %d is a control character, which would end the unit's Environment= line: take it out of PATH", d, d[i], i)
		}
	}
	return nil
}

// unit is the systemd.Unit of what the steps found.
func (s *startupUnit) unit() systemd.Unit {
	u := systemd.Unit{Name: s.name, Bin: s.bin, Config: s.cfg, User: s.userName, Dir: s.dir,
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
		if systemd.Under(p, "/home") || systemd.Under(p, "/root") || systemd.Under(p, "/run/user") {
			u.ProtectHome = "read-only"
		}
	}
	return u
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
