// The sweep's peers: which modes are peers and the workload each serves, and finding
// each peer's programs on this machine (a missing one is skipped, with why).

package ceiling

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/onehost/onehost/internal/frontproxy"
)

// Peers in the same run: what a user would otherwise deploy, measured in the same sweep
// at the same N, with the same generator, pinning and connections as our cluster, so the
// report gives ratios rather than absolutes from different days and machines.
//
//   - ModePM2: PM2's cluster mode (`pm2 start heavy.js -i N`) running the Fastify
//     implementation of the heavy PATCH (the node-heavy peer), for the heavy workload.
//   - ModeNginx: nginx with N worker processes serving the static page from disk
//     (configs/nginx/static.conf through package frontproxy), for the static workload.
//   - ModePM2Compress: ModePM2 with @fastify/compress applied to the peer's Fastify
//     (threshold 1 KiB, its default levels: gzip 6, br 4, zstd 3, ours' 6, 4 and 2), for
//     heavy+gzip, heavy+br and, where node's zlib has it (22.15+), heavy+zstd.
//   - ModeNginxGzip: ModeNginx's template with `gzip on` at level 6 (ours' default) in
//     place of `gzip_static on`: the page compressed per request, for static+gzip.
//
// peerWorkload is the one workload each peer stands in for; peerCodings the content
// codings it serves that workload in (nginx's gzip_static sends the .gz beside the page;
// Debian's nginx has no brotli or zstd without extra modules); a peer in peerCodedOnly
// serves only those (its plain answers would be its sibling's).
var (
	peerWorkload  = map[string]string{ModePM2: "heavy", ModeNginx: "static", ModePM2Compress: "heavy", ModeNginxGzip: "static"}
	peerCodings   = map[string][]string{ModeNginx: {"gzip"}, ModePM2Compress: {"gzip", "zstd", "br"}, ModeNginxGzip: {"gzip"}}
	peerCodedOnly = map[string]bool{ModePM2Compress: true, ModeNginxGzip: true}
)

// PeerCompressVersion is the @fastify/compress that ModePM2Compress is measured with,
// pinned as the node-heavy peer pins fastify (5.12.8): its 9.x declares fastify 5.x.
const PeerCompressVersion = "9.2.0"

func isPeer(mode string) bool { _, ok := peerWorkload[mode]; return ok }

// ServesWorkload reports whether a server of mode runs workload: the cluster and the one
// process run every workload, a peer only the one it stands in for (PM2 the heavy PATCH,
// nginx the static page).
func ServesWorkload(mode, workload string) bool {
	if workload == AppWorkload { // the user's app: under the supervisor, and under PM2 beside it
		return mode == ModeCluster || mode == ModePM2
	}
	if w, ok := peerWorkload[mode]; ok {
		base, coding, encoded := strings.Cut(workload, "+")
		if !encoded {
			return w == base && !peerCodedOnly[mode]
		}
		return w == base && slices.Contains(peerCodings[mode], coding)
	}
	return true
}

// workloadsFor are the configured workloads a server of mode runs: those it serves, less
// the codings findPeers found it lacks here.
func (s *Sweeper) workloadsFor(mode string) []Workload {
	var out []Workload
	for _, w := range s.cfg.Workloads {
		if ServesWorkload(mode, w.Name) && !slices.Contains(s.peers.lacks[mode], requestedCoding(w.Name)) {
			out = append(out, w)
		}
	}
	return out
}

// peerSetup is what findPeers found: the programs and files each peer runs with, and
// why a peer is skipped.
type peerSetup struct {
	skip       map[string]string // mode -> why it is skipped
	pm2        string            // pm2 binary, resolved
	pm2Script  string            // the script PM2 runs, absolute
	pm2Dir     string            // its working directory; "": the sweep's
	nginx      string            // nginx binary, resolved
	nginxTmpl  []byte
	gzipTmpl   []byte // nginxTmpl with gzip on in place of gzip_static (ModeNginxGzip)
	staticRoot string // absolute
	peerDir    string // the Fastify peer's directory, absolute (ModePM2Compress)
	// lacks are the codings a peer cannot serve on this host (node without zstd),
	// left out of its workloads with a note.
	lacks map[string][]string
}

// findPeers resolves each requested peer that has a workload to run, and notes (once)
// each one that cannot run, so a machine without node, pm2 or nginx still sweeps.
func (s *Sweeper) findPeers() {
	s.peers.skip = make(map[string]string)
	s.peers.lacks = make(map[string][]string)
	for _, m := range s.cfg.Modes {
		if !isPeer(m) || len(s.workloadsFor(m)) == 0 {
			continue
		}
		var why string
		switch m {
		case ModePM2:
			if s.appMode() {
				why = s.findAppPM2()
			} else {
				why = s.findPM2()
			}
		case ModeNginx:
			why = s.findNginx()
		case ModePM2Compress:
			why = s.findPM2Compress()
		case ModeNginxGzip:
			if why = s.findNginx(); why == "" {
				why = s.gzipTemplate()
			}
		}
		if why != "" {
			s.peers.skip[m] = why
			stands := peerWorkload[m]
			if s.appMode() {
				stands = "the same app"
			}
			s.notes = append(s.notes, fmt.Sprintf("peer %s (%s) skipped: %s", m, stands, why))
		}
	}
}

func (s *Sweeper) findPM2() string {
	dir, why := s.findPeerHeavy()
	if why != "" {
		return why
	}
	if why = s.findPM2Binary(); why == "" {
		s.peers.pm2Script, s.peers.pm2Dir = filepath.Join(dir, "heavy.js"), dir
	}
	return why
}

// findPM2Compress checks what ModePM2Compress needs beyond ModePM2's: @fastify/compress
// installed beside fastify, and node's zlib for each coding asked (zstd from 22.15).
func (s *Sweeper) findPM2Compress() string {
	dir, why := s.findPeerHeavy()
	if why != "" {
		return why
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@fastify", "compress")); err != nil {
		return fmt.Sprintf("no node_modules/@fastify/compress in %s (run npm install @fastify/compress@%s there)", dir, PeerCompressVersion)
	}
	if why = s.findPM2Binary(); why != "" {
		return why
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return fmt.Sprintf("node not found: %v", err)
	}
	// @fastify/compress leaves out what zlib lacks and would answer identity to it.
	wantZstd := slices.ContainsFunc(s.workloadsFor(ModePM2Compress), func(w Workload) bool { return requestedCoding(w.Name) == "zstd" })
	probe := exec.Command(node, "-e", "process.stdout.write(typeof require('zlib').createZstdCompress)")
	if out, err := probe.Output(); wantZstd && (err != nil || string(out) != "function") {
		v, _ := exec.Command(node, "--version").Output()
		s.peers.lacks[ModePM2Compress] = []string{"zstd"}
		s.notes = append(s.notes, fmt.Sprintf("peer %s: node %s has no zstd in zlib (22.15+): heavy+zstd not measured on it",
			ModePM2Compress, strings.TrimSpace(string(v))))
	}
	s.peers.peerDir = dir
	return ""
}

// findPeerHeavy checks the Fastify peer's directory (-peer-heavy) and returns it absolute.
func (s *Sweeper) findPeerHeavy() (string, string) {
	if s.cfg.PeerHeavyDir == "" {
		return "", "no Fastify peer directory given (ceiling sweep -peer-heavy DIR, make PEER_HEAVY=DIR; docs/ceiling.md says how to prepare one)"
	}
	dir, err := filepath.Abs(s.cfg.PeerHeavyDir)
	if err != nil {
		return "", err.Error()
	}
	if _, err := os.Stat(filepath.Join(dir, "heavy.js")); err != nil {
		return "", fmt.Sprintf("no heavy.js in %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "fastify")); err != nil {
		return "", fmt.Sprintf("no node_modules/fastify in %s (run npm install there)", dir)
	}
	return dir, ""
}

// findPM2Binary resolves pm2, and node when pm2 is a node script.
func (s *Sweeper) findPM2Binary() string {
	bin := s.cfg.PM2
	if bin == "" {
		bin = "pm2"
	}
	pm2, err := exec.LookPath(bin)
	if err != nil {
		return fmt.Sprintf("pm2 not found (%v): npm install -g pm2, or give the path of node_modules/.bin/pm2", err)
	}
	if interp := shebang(pm2); strings.Contains(interp, "node") {
		if _, err := exec.LookPath("node"); err != nil {
			return fmt.Sprintf("%s runs on node (%s), which is not on PATH", pm2, interp)
		}
	}
	s.peers.pm2 = pm2
	return ""
}

// shebang is the interpreter line of a script ("/usr/bin/env node"), "" for a binary.
func shebang(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if !strings.HasPrefix(line, "#!") {
		return ""
	}
	return strings.TrimSpace(line[2:])
}

func (s *Sweeper) findNginx() string {
	var err error
	bin := s.cfg.Nginx
	if bin == "" {
		bin, err = frontproxy.LookPath()
	} else if bin, err = exec.LookPath(bin); err != nil {
		err = fmt.Errorf("nginx not found: %w", err)
	}
	if err != nil {
		return err.Error()
	}
	tmpl := s.cfg.NginxTemplate
	if tmpl == "" {
		tmpl = "configs/nginx/static.conf"
	}
	b, err := os.ReadFile(tmpl)
	if err != nil {
		return fmt.Sprintf("read the nginx template: %v", err)
	}
	root := s.cfg.StaticRoot
	if root == "" {
		root = "internal/shop/static"
	}
	if root, err = filepath.Abs(root); err != nil {
		return err.Error()
	}
	for _, w := range s.workloadsFor(ModeNginx) {
		file := filepath.Join(root, strings.TrimPrefix(w.Path, "/static/"))
		if _, err := os.Stat(file); err != nil {
			return fmt.Sprintf("nothing to serve for %s: %v", w.Path, err)
		}
	}
	s.peers.nginx, s.peers.nginxTmpl, s.peers.staticRoot = bin, b, root
	return ""
}
