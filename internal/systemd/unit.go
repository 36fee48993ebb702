package systemd

import (
	"io"
	"regexp"
	"slices"
	"strings"
	"text/template"
)

// ControlByte is the index of the first C0 control byte or DEL in s, -1 if none.
func ControlByte(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return i
		}
	}
	return -1
}

// validUser matches what User= takes: a user name as useradd makes them (a letter or
// '_' first; letters, digits, '_', '.' and '-'; 32 at most) or a numeric uid.
var validUser = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.-]{0,31}|[0-9]{1,10})$`)

// WritablePaths is the ReadWritePaths= list: sorted, each once, none under another in the
// list, and none the unit may write anyway (its state, logs and runtime directories).
func WritablePaths(ps []string, name string) []string {
	slices.Sort(ps)
	var out []string
	for _, p := range slices.Compact(ps) {
		if slices.ContainsFunc(out, func(q string) bool { return Under(p, q) }) ||
			Under(p, "/var/lib/"+name) || Under(p, "/var/log/"+name) || Under(p, "/run/"+name) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Under says whether p is dir or lies below it.
func Under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// Unit is what the unit `supervisor startup` prints says: the supervisor in the
// foreground (Type=notify) running a configuration, hardened as configs/onehost.service.
type Unit struct {
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

// ValidUser says whether name can be User=: a user name as useradd makes them (a letter or
// '_' first; letters, digits, '_', '.' and '-'; 32 at most) or a numeric uid.
func ValidUser(name string) bool { return validUser.MatchString(name) }

// Write writes the unit.
func (u Unit) Write(w io.Writer) error { return unitTemplate.Execute(w, u) }
