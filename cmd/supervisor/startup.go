package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
)

// runStartup is `supervisor startup`, PM2's `pm2 startup` for systemd: it prints a unit
// that runs `supervisor run -config FILE` at boot, hardened as configs/onehost.service is,
// and the two commands that install and start it. It installs nothing itself: the
// commands need root, and a user reads what they run as root first.
//
// Unlike pm2 startup it needs no `pm2 save`: the unit names the configuration file, which
// is the process list.
func runStartup(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor startup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", defaultConfig, "the configuration the unit runs (our YAML or a PM2 ecosystem file); made absolute")
	name := fs.String("name", "", "the unit's name (default: the configuration file's name without extensions, e.g. ecosystem)")
	userName := fs.String("user", "", "the user the service runs as (default: the current user)")
	dir := fs.String("dir", "", "the working directory (default: the configuration file's directory, where its relative paths resolve)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("startup: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := filepath.Abs(*configPath)
	if err != nil {
		return fmt.Errorf("startup: config path: %w", err)
	}
	if _, err := os.Stat(cfg); err != nil {
		return fmt.Errorf("startup: config: %w", err)
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("startup: find the supervisor binary: %w", err)
	}
	if bin, err = filepath.EvalSymlinks(bin); err != nil {
		return fmt.Errorf("startup: find the supervisor binary: %w", err)
	}
	if *name == "" {
		*name = strings.SplitN(filepath.Base(cfg), ".", 2)[0]
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_.-]+$`).MatchString(*name) {
		return fmt.Errorf("startup: -name %q: want letters, digits, '_', '.' or '-' (a unit name)", *name)
	}
	if *userName == "" {
		u, err := user.Current()
		if err != nil {
			return fmt.Errorf("startup: current user: %w (give -user)", err)
		}
		*userName = u.Username
	}
	if *dir == "" {
		*dir = filepath.Dir(cfg)
	}
	if *dir, err = filepath.Abs(*dir); err != nil {
		return fmt.Errorf("startup: -dir: %w", err)
	}
	for _, p := range []string{bin, cfg, *dir} {
		if strings.ContainsAny(p, " \t\n\"'\\%$") {
			return fmt.Errorf("startup: path %q: a unit's command line would need quoting: choose a path without spaces, quotes, '%%' or '$'", p)
		}
	}
	u := unitParams{Name: *name, Bin: bin, Config: cfg, User: *userName, Dir: *dir,
		Socket: "/run/" + *name + "/supervisor.sock",
		// ProtectHome=yes would hide a working directory under /home: read-only keeps it
		// visible (the app writes only to the state, logs and runtime directories).
		ProtectHome: "yes"}
	for _, p := range []string{cfg, *dir, bin} {
		if under(p, "/home") || under(p, "/root") || under(p, "/run/user") {
			u.ProtectHome = "read-only"
		}
	}
	if err := unitTemplate.Execute(stdout, u); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n# To install and start it at boot (as pm2 startup), run:\n"+
		"#   %s startup -config %s -name %s -user %s -dir %s | sudo tee /etc/systemd/system/%s.service >/dev/null\n"+
		"#   sudo systemctl daemon-reload && sudo systemctl enable --now %s\n"+
		"# then: systemctl reload %s (rolling reload), journalctl -u %s (logs), supervisor status -socket %s\n",
		bin, cfg, u.Name, u.User, u.Dir, u.Name, u.Name, u.Name, u.Name, u.Socket)
	return nil
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

type unitParams struct {
	Name, Bin, Config, User, Dir, Socket, ProtectHome string
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
ExecStart={{.Bin}} run -config {{.Config}} -socket {{.Socket}}
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
WorkingDirectory={{.Dir}}
# The only places the service may write under ProtectSystem=strict: /var/lib/{{.Name}},
# /var/log/{{.Name}} (for -log-dir or -log-file) and /run/{{.Name}} (the control socket).
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
