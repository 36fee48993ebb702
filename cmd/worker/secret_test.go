package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/onehost/onehost/internal/proctest"
	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/token"
)

func TestCheckSecret(t *testing.T) {
	own := strings.Repeat("k", minSecretLen)
	tests := []struct {
		name        string
		secret      string
		allowPublic bool
		addr        net.Addr
		wantErr     bool
		wantLog     string // a message logged at warn, "" for none
	}{
		{"public on 127.0.0.1", DefaultSecret, false, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3000}, false, "published secret"},
		{"public on 127.0.0.2", DefaultSecret, false, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 3000}, false, "published secret"},
		{"public on ::1", DefaultSecret, false, &net.TCPAddr{IP: net.IPv6loopback, Port: 3000}, false, "published secret"},
		{"public on a unix socket", DefaultSecret, false, &net.UnixAddr{Name: "/run/w.sock", Net: "unix"}, false, "published secret"},
		{"public on 0.0.0.0", DefaultSecret, false, &net.TCPAddr{IP: net.IPv4zero, Port: 3000}, true, ""},
		{"public on ::", DefaultSecret, false, &net.TCPAddr{IP: net.IPv6unspecified, Port: 3000}, true, ""},
		{"public on 10.0.0.1", DefaultSecret, false, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 3000}, true, ""},
		{"public on 0.0.0.0, -challenge-secret", DefaultSecret, true, &net.TCPAddr{IP: net.IPv4zero, Port: 3000}, false, ""},
		{"own on 0.0.0.0", own, false, &net.TCPAddr{IP: net.IPv4zero, Port: 3000}, false, ""},
		{"short own on 0.0.0.0", own[1:], false, &net.TCPAddr{IP: net.IPv4zero, Port: 3000}, false, "JWT_SECRET is short"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			err := checkSecret(tc.secret, tc.allowPublic, tc.addr, zap.New(core))
			if (err != nil) != tc.wantErr {
				t.Fatalf("checkSecret = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "-challenge-secret") {
				t.Errorf("the refusal does not name the flag that lifts it: %v", err)
			}
			var got string
			if e := logs.All(); len(e) > 0 {
				got = e[0].Message
			}
			if tc.wantLog == "" && got != "" || !strings.Contains(got, tc.wantLog) {
				t.Errorf("warning %q, want one containing %q", got, tc.wantLog)
			}
		})
	}
}

// TestPublicSecretOffLoopback runs real workers with the challenge's published secret: one
// listening on every interface (0.0.0.0, port 0: reachable from other hosts, no network
// needed) refuses to start, bound itself or handed the socket as fd 3 by a supervisor;
// with -challenge-secret (or ALLOW_CHALLENGE_SECRET=1) it serves, as it does on 127.0.0.1;
// and a token signed with the public secret is honoured where it is accepted.
func TestPublicSecretOffLoopback(t *testing.T) {
	db := seedtest.Path(t)
	everywhere := func(t *testing.T) *os.File {
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	tests := []struct {
		name      string
		args, env []string
		inherit   bool // the socket at fd 3, bound to 0.0.0.0
		refused   bool
	}{
		{"0.0.0.0 refused", nil, []string{"HOST=0.0.0.0"}, false, true},
		{"inherited 0.0.0.0 refused", nil, []string{"LISTEN_FDS=1"}, true, true},
		{"0.0.0.0 with -challenge-secret", []string{"-challenge-secret"}, []string{"HOST=0.0.0.0"}, false, false},
		{"0.0.0.0 with ALLOW_CHALLENGE_SECRET=1", nil, []string{"HOST=0.0.0.0", "ALLOW_CHALLENGE_SECRET=1"}, false, false},
		{"inherited 0.0.0.0 with -challenge-secret", []string{"-challenge-secret"}, []string{"LISTEN_FDS=1"}, true, false},
		{"127.0.0.1", nil, []string{"HOST=127.0.0.1"}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], tc.args...)
			cmd.Env = append([]string{"ONEHOST_TEST_WORKER=1", "JWT_SECRET=" + DefaultSecret, "SQLITE_PATH=" + db,
				"PORT=0", "PATH=" + os.Getenv("PATH")}, tc.env...)
			if tc.inherit {
				cmd.ExtraFiles = []*os.File{everywhere(t)}
			}
			if tc.refused {
				out, err := cmd.CombinedOutput()
				if err == nil {
					t.Fatalf("the worker served the public secret on every interface:\n%s", out)
				}
				if !strings.Contains(string(out), "published secret") || !strings.Contains(string(out), "-challenge-secret") {
					t.Fatalf("exit %v without an error that names the fix:\n%s", err, out)
				}
				return
			}
			w := proctest.Start(t, cmd)
			_, port, _ := net.SplitHostPort(w.Addr)
			req, _ := http.NewRequest("POST", "http://127.0.0.1:"+port+"/posts/1/like", nil)
			req.Header.Set("Authorization", "Bearer "+token.Sign([]byte(DefaultSecret), 7, "user_7", time.Now(), time.Now().Add(time.Hour)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
				t.Errorf("like with a public-secret token: %d, want 201 or 200", resp.StatusCode)
			}
		})
	}
}
