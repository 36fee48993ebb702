package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestResolveListen(t *testing.T) {
	for _, tc := range []struct {
		name, host string
		port       int
		want       string // the address to bind; "error" for an error
	}{
		{"no host: every interface", "", 8080, ":8080"},
		{"localhost", "localhost", 8080, "127.0.0.1:8080"},
		{"IPv4", "127.0.0.1", 8080, "127.0.0.1:8080"},
		{"IPv6", "::1", 8080, "[::1]:8080"},
		{"IPv6 in brackets", "[::1]", 8080, "[::1]:8080"},
		{"v4-mapped", "::ffff:127.0.0.1", 8080, "127.0.0.1:8080"},
		{"every IPv6 interface", "::", 8080, "[::]:8080"},
		{"port 0", "", 0, "error"},
		{"port out of range", "", 70000, "error"},
		{"a name that does not resolve", "no-such-host.invalid", 8080, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := resolveListen(nodeMsg{Onehost: "listen", Port: tc.port, Host: tc.host})
			if tc.want == "error" {
				if r.err == nil {
					t.Errorf("resolveListen = %q, want an error", r.bind)
				}
				return
			}
			if r.err != nil || r.bind != tc.want {
				t.Errorf("resolveListen = %q, %v; want %q", r.bind, r.err, tc.want)
			}
		})
	}
}

// TestAppPortFor: a slot's first listen on an app port binds it; the slot's next worker
// gets the same socket (its queue); another slot joins the port's SO_REUSEPORT group with a
// socket of its own; another cluster (another app of the supervisor) asking for it is
// refused with the holder named, as any process that holds it would be; closing the slots'
// sockets frees the port.
func TestAppPortFor(t *testing.T) {
	port := freeTCPPort(t)
	req := resolveListen(nodeMsg{Onehost: "listen", Port: port, Host: "127.0.0.1"})
	s := &Supervisor{log: zap.NewNop(), addr: "127.0.0.1:3000", slots: map[int]*slot{0: {id: 0}, 1: {id: 1}}}
	a0, why, _ := s.appPortFor(s.slots[0], req)
	if a0 == nil {
		t.Fatalf("slot 0: %s", why)
	}
	if again, _, _ := s.appPortFor(s.slots[0], req); again != a0 {
		t.Errorf("slot 0 asked again: a new socket, want the slot's (%v, %v)", again, a0)
	}
	a1, why, _ := s.appPortFor(s.slots[1], req)
	if a1 == nil || a1 == a0 || socketInode(a1.f) == socketInode(a0.f) {
		t.Fatalf("slot 1: %v %s, want a socket of its own on the port", a1, why)
	}
	if a0.addr != "127.0.0.1:"+strconv.Itoa(port) || a1.addr != a0.addr {
		t.Errorf("addresses %s and %s, want 127.0.0.1:%d", a0.addr, a1.addr, port)
	}
	if got := s.AppPorts(); len(got) != 1 || got[0] != a0.addr {
		t.Errorf("AppPorts = %q, want [%s]", got, a0.addr)
	}

	other := &Supervisor{log: zap.NewNop(), addr: "127.0.0.1:3001", slots: map[int]*slot{0: {id: 0}}}
	ap, why, fix := other.appPortFor(other.slots[0], req)
	if ap != nil || !strings.Contains(why, "is in use by this supervisor") || !strings.Contains(fix, "-listen HOST:PORT") {
		t.Errorf("another app asking for the port: %v, why %q, fix %q; want it refused, the holder named, -listen in the fix", ap, why, fix)
	}

	s.closeAppPorts(s.slots[0])
	s.closeAppPorts(s.slots[1])
	if got := s.AppPorts(); len(got) != 0 {
		t.Errorf("AppPorts after closing = %q, want none", got)
	}
	ln, err := net.Listen("tcp", req.bind)
	if err != nil {
		t.Errorf("the port after the slots closed theirs: %v, want it free", err)
	} else {
		ln.Close()
	}
}

// freeTCPPort is the port of freeAddr.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// TestNodePreloadAppPort runs an app under the preload that listens on a port of its own,
// with this test as the supervisor on Node's IPC channel: the preload asks for the port,
// and the server listens on the socket sent back (Node's handle passing) and answers
// there; when the answer is an error, the app (with no 'error' handler) prints the
// preload's one line, first and alone, and exits 1.
func TestNodePreloadAppPort(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("SKIP: node not installed (Debian: .ci/run installs it)")
	}
	port := freeTCPPort(t)
	start := func(t *testing.T) (*exec.Cmd, *nodeChannel, *bufio.Reader, *bytes.Buffer) {
		cmd, _ := preloadedNode(t, "testdata/preload-own.js")
		cmd.Args = append(cmd.Args, strconv.Itoa(port))
		nc, child, err := newNodeChannel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.f.Close() })
		cmd.ExtraFiles = append(cmd.ExtraFiles, child) // fd 4
		cmd.Env = append(cmd.Env, "NODE_CHANNEL_FD=4", "NODE_CHANNEL_SERIALIZATION_MODE=json")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		child.Close()
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, nc, bufio.NewReader(nc.f), &stderr
	}
	request := func(t *testing.T, r *bufio.Reader) nodeMsg {
		t.Helper()
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read the preload's request: %v", err)
		}
		m, ok := parseNodeMsg(bytes.TrimSpace(line))
		if !ok || m.Onehost != "listen" || m.Port != port || m.Host != "" {
			t.Fatalf("the preload said %s, want a listen request for port %d", line, port)
		}
		return m
	}

	t.Run("served", func(t *testing.T) {
		_, nc, r, _ := start(t)
		m := request(t, r)
		f, addr, err := listen("127.0.0.1:" + strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		msg := map[string]any{"cmd": "NODE_HANDLE", "type": "net.Native", "msg": map[string]any{"cmd": nodeListenCmd, "seq": m.Seq, "addr": addr}}
		if err := nc.sendFile(msg, f); err != nil {
			t.Fatal(err)
		}
		var listening map[string]any
		for listening == nil { // Node's ACK of the handle comes first
			line, err := r.ReadBytes('\n')
			if err != nil {
				t.Fatalf("read the preload's messages: %v", err)
			}
			var v map[string]any
			if json.Unmarshal(line, &v) == nil && v["onehost"] == "listening" {
				listening = v
			}
		}
		if listening["addr"] != addr {
			t.Errorf("the preload said %v, want it listening on %s", listening, addr)
		}
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "own\n" {
			t.Errorf("GET %s: %q, want the app's answer", addr, body)
		}
	})
	t.Run("refused", func(t *testing.T) {
		cmd, nc, r, stderr := start(t)
		m := request(t, r)
		if err := nc.sendJSON(map[string]any{"cmd": nodeListenCmd, "seq": m.Seq, "error": "port " + strconv.Itoa(port) + " is in use by pid 1 (init)", "fix": "stop it"}); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("app exit: %v, want exit status 1", err)
		}
		want := "onehost: the app's listen(" + strconv.Itoa(port) + ") cannot be served: port " + strconv.Itoa(port) + " is in use by pid 1 (init): stop it\n"
		if stderr.String() != want {
			t.Errorf("stderr:\n%s\nwant the preload's one line alone:\n%s", stderr, want)
		}
	})
}
