package appspec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/onehost/onehost/internal/cluster"
)

// LaunchCheck judges, before anything starts, what would make every worker of an app die at
// once and be restarted until its slot is errored: a working directory that is not there,
// a program not found (on the PATH the workers get), a script missing, and for our own
// worker the environment it refuses to start without (cmd/worker: SQLITE_PATH, an existing
// database in a writable directory, and JWT_SECRET or a readable JWT_SECRET_FILE). `run
// -check` runs it in the supervisor's own environment; `startup` in the environment its
// unit gives (PATH, the -env-file), from the unit's WorkingDirectory.
type LaunchCheck struct {
	// Dir is the supervisor's working directory: the config's relative paths (command,
	// cwd, the env's paths) resolve against it, as internal/cluster starts workers there.
	Dir string
	// Getenv is the environment the supervisor runs with (the workers inherit it), the
	// env file's variables over it.
	Getenv func(string) string
	// Environ is the same environment as KEY=VALUE lines, the one our worker's own check
	// (`worker -check`, askWorker) runs in, the app's env over it. Nil: the app's env only.
	Environ []string
	// Ours is the `worker` binary beside the supervisor (the default command).
	Ours string
	// Access: the checking user is the one the workers run as, so a directory's
	// permissions (the database's, for its WAL) can be judged with access(2).
	Access bool
	// Config names the file in the messages.
	Config string
}

// Check returns one error per problem (nil when none), each naming the field and the fix.
func (lc LaunchCheck) Check(specs []cluster.App) error {
	var errs []error
	for _, sp := range specs {
		for _, err := range lc.app(sp) {
			if sp.Name != "" {
				err = fmt.Errorf("app %s: %w", sp.Name, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (lc LaunchCheck) app(sp cluster.App) []error {
	cfg := sp.Config
	var errs []error
	file := lc.file()
	workDir := lc.Dir
	if fi, err := os.Stat(lc.Dir); err != nil || !fi.IsDir() {
		return []error{fmt.Errorf("working directory %s does not exist: start the supervisor (or give startup -dir) where the configuration's relative paths resolve", lc.Dir)}
	}
	if cfg.Cwd != "" {
		workDir = Abs(lc.Dir, cfg.Cwd)
		if fi, err := os.Stat(workDir); err != nil || !fi.IsDir() {
			return []error{fmt.Errorf("cwd: %q (%s) is not a directory the workers can start in: create it, or fix cwd in %s (a relative cwd resolves against %s, where the supervisor starts)",
				cfg.Cwd, workDir, file, lc.Dir)}
		}
	}
	getenv := func(k string) string {
		if v, ok := cfg.Env[k]; ok {
			return v
		}
		return lc.Getenv(k)
	}
	if len(cfg.Command) == 0 {
		return nil // the supervisor's own default, judged by cluster.New
	}
	prog := cfg.Command[0]
	if strings.Contains(prog, "/") {
		p := Abs(workDir, prog)
		if err := executable(p); err != nil {
			errs = append(errs, fmt.Errorf("command: %s (%s): %v: fix the path in %s (relative to the workers' directory %s), or make it executable",
				prog, p, err, file, workDir))
		}
	} else if _, err := lookPathIn(prog, getenv("PATH"), workDir); err != nil {
		errs = append(errs, fmt.Errorf("command: %q is not found on the workers' PATH (%s): give its absolute path in %s, or add its directory to PATH (startup copies this shell's PATH into the unit)",
			prog, getenv("PATH"), file))
	}
	if script := InterpretedScript(cfg.Command); script != "" {
		p := Abs(workDir, script)
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("script: %s is not there (%s, relative to the workers' directory): fix script or cwd in %s, or start from the directory it is relative to",
				script, p, file))
		}
	}
	if lc.isOurWorker(Abs(workDir, prog)) {
		errs = append(errs, lc.ourWorker(cfg, getenv, workDir)...)
	}
	return errs
}

// file names the configuration in messages.
func (lc LaunchCheck) file() string {
	if lc.Config != "" {
		return lc.Config
	}
	return "the configuration"
}

// isOurWorker: the command is cmd/worker, named as the default or by a path to it.
func (lc LaunchCheck) isOurWorker(p string) bool {
	if p == lc.Ours {
		return true
	}
	if filepath.Base(p) != "worker" {
		return false
	}
	a, err1 := os.Stat(p)
	b, err2 := os.Stat(lc.Ours)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// ourWorker is cmd/worker's refusals at start, before they cost a restart loop: its
// database and secret judged here, with the fix where the unit or the config gives them,
// then every setting by the worker itself (askWorker).
func (lc LaunchCheck) ourWorker(cfg cluster.Config, getenv func(string) string, workDir string) []error {
	if slices.ContainsFunc(cfg.Command[1:], func(a string) bool {
		return a == "seed" || a == "seed-products"
	}) {
		return nil
	}
	var errs []error
	var judged []string // the variables named here: left out of the worker's own verdict
	if err := workerDB(getenv, cfg.Command, workDir, lc.Access); err != nil {
		errs, judged = append(errs, err), append(judged, "SQLITE_PATH")
	}
	if err := workerSecret(getenv, workDir); err != nil {
		errs, judged = append(errs, err), append(judged, "JWT_SECRET", "JWT_SECRET_FILE")
	}
	if err := lc.askWorker(cfg, workDir, judged); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// workerDB judges the worker's database, SQLITE_PATH or -db in command: set, a file, and
// (access: the checking user is the workers') in a directory it may write.
func workerDB(getenv func(string) string, command []string, workDir string, access bool) error {
	db := getenv("SQLITE_PATH")
	for i, a := range command[1:] { // -db wins over SQLITE_PATH, as in the worker
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "db="); ok && strings.HasPrefix(a, "-") {
			db = v
		} else if (a == "-db" || a == "--db") && i+2 < len(command) {
			db = command[i+2]
		}
	}
	if db == "" {
		return errors.New("env: SQLITE_PATH is not set, and the worker refuses to start without its database: " +
			"set it in the env file (startup -env-file / run -env-file: SQLITE_PATH=/var/lib/NAME/feed.db) or under env: in the config; `worker seed -db PATH` writes a database")
	}
	p := Abs(workDir, db)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("env: SQLITE_PATH %s (%s) is not a database file: copy the seed there (make run makes data/feed.db), or point SQLITE_PATH at one (relative paths resolve against %s)",
			db, p, workDir)
	}
	if access {
		// The WAL and the shared-memory file are made beside it: the directory must be
		// writable, not only the file (under the unit: ReadWritePaths=).
		if err := syscall.Access(filepath.Dir(p), 2 /* W_OK */); err != nil {
			return fmt.Errorf("env: SQLITE_PATH %s: its directory %s is not writable (%v), and SQLite writes its WAL beside the database: make it writable for the service's user (under systemd: ReadWritePaths=%s, which startup writes)",
				db, filepath.Dir(p), err, filepath.Dir(p))
		}
	}
	return nil
}

// workerSecret judges the worker's JWT secret: JWT_SECRET, or the file JWT_SECRET_FILE
// names, one of them.
func workerSecret(getenv func(string) string, workDir string) error {
	secret, secretFile := getenv("JWT_SECRET"), getenv("JWT_SECRET_FILE")
	switch {
	case secret != "" && secretFile != "":
		return errors.New("env: JWT_SECRET and JWT_SECRET_FILE are both set, which the worker refuses: keep JWT_SECRET_FILE (the secret stays out of the environment)")
	case secretFile != "":
		p := Abs(workDir, secretFile)
		if b, err := os.ReadFile(p); err != nil {
			return fmt.Errorf("env: JWT_SECRET_FILE %s: %v: point it at a file holding the HS256 secret that the service's user can read (make run makes data/jwt_secret)", secretFile, err)
		} else if strings.TrimSpace(string(b)) == "" {
			return fmt.Errorf("env: JWT_SECRET_FILE %s is empty: put the HS256 secret in it", secretFile)
		}
	case secret == "":
		return errors.New("env: neither JWT_SECRET nor JWT_SECRET_FILE is set, and the worker refuses to start without the tokens' secret: " +
			"put JWT_SECRET_FILE=PATH (a file of mode 0600 holding it) in the env file (startup -env-file / run -env-file) or under env: in the config")
	}
	return nil
}

// InterpretedScript is the script of an interpreter's command line ([node, ARGS..., SCRIPT,
// ...], as an ecosystem file's script becomes), "" when there is none to check (python -m,
// node -e, another program).
func InterpretedScript(command []string) string {
	base := filepath.Base(command[0])
	switch {
	case base == "node" || base == "nodejs" || base == "bun" || base == "deno",
		strings.HasPrefix(base, "python"), base == "ruby", base == "perl", base == "php":
	default:
		return ""
	}
	for i := 1; i < len(command); i++ {
		a := command[i]
		switch {
		case a == "-e" || a == "-p" || a == "-m" || a == "-c" || a == "--eval" || a == "--print" || a == "-" || a == "run":
			return "" // code or a module, not a file
		case a == "-r" || a == "--require" || a == "--import" || a == "--loader" || a == "-W" || a == "-X":
			i++ // the option's value
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return ""
}

// lookPathIn is exec.LookPath over the given PATH rather than this process's, relative
// entries resolved against dir (where the workers start).
func lookPathIn(name, path, dir string) (string, error) {
	for _, d := range filepath.SplitList(path) {
		p := Abs(dir, filepath.Join(d, name))
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found", name)
}

// executable: p is a regular file with an execute bit.
func executable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		if u := errors.Unwrap(err); u != nil {
			return u // "no such file or directory", without the path again
		}
		return err
	case fi.IsDir():
		return errors.New("a directory, not a program")
	case fi.Mode()&0o111 == 0:
		return errors.New("not executable")
	}
	return nil
}

// Abs is p made absolute against dir (p itself when absolute).
func Abs(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// CheckLaunch is LaunchCheck for `run -check`: from this directory, in this environment
// (getenv, and as lines environ, what the workers inherit) with the -env-file's variables
// over it (as systemd's EnvironmentFile= sets them).
func CheckLaunch(specs []cluster.App, getenv func(string) string, environ, fileEnv []string, ours, config string) error {
	dir, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("check: working directory: %w", err)
	}
	lc := LaunchCheck{Dir: dir, Getenv: OverEnv(fileEnv, getenv), Environ: append(slices.Clone(environ), fileEnv...),
		Ours: ours, Access: true, Config: config}
	if err := lc.Check(specs); err != nil {
		return fmt.Errorf("check: the workers would not start (each would be restarted until its slot is errored):\n%w", err)
	}
	return nil
}

// OverEnv is getenv with the KEY=VALUE list over it (a later KEY wins).
func OverEnv(env []string, getenv func(string) string) func(string) string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) string {
		if v, ok := m[k]; ok {
			return v
		}
		return getenv(k)
	}
}
