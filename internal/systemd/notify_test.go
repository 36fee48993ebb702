package systemd

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen is a datagram socket standing in for systemd's.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

func TestNotify(t *testing.T) {
	for _, tc := range []struct{ name, socket string }{
		{"path", filepath.Join(t.TempDir(), "notify")},
		{"abstract", "@onehost-sdnotify-test-" + t.Name()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := listen(t, tc.socket)
			n, err := NewNotifier(tc.socket)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			for _, want := range []string{"READY=1\nSTATUS=2/2 online", Reloading(), "STOPPING=1"} {
				if err := n.Notify(want); err != nil {
					t.Fatal(err)
				}
				if got := read(t, srv); got != want {
					t.Fatalf("got %q, want %q", got, want)
				}
			}
		})
	}
}

func TestNotNotified(t *testing.T) {
	n, err := NewNotifier("")
	if n != nil || err != nil {
		t.Fatalf("NewNotifier(\"\") = %v, %v; want nil, nil", n, err)
	}
	if err := n.Notify("READY=1"); err != nil {
		t.Fatalf("nil Notifier: %v", err)
	}
	for _, bad := range []string{"relative/path", "vsock:2:1234"} {
		if _, err := NewNotifier(bad); err == nil || !strings.Contains(err.Error(), "absolute path") {
			t.Errorf("NewNotifier(%q): %v, want an error naming what is wanted", bad, err)
		}
	}
	if _, err := NewNotifier(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("New of a socket nobody listens on: no error")
	}
}

func TestFormats(t *testing.T) {
	r := Reloading()
	if !strings.HasPrefix(r, "RELOADING=1\nMONOTONIC_USEC=") || len(r) <= len("RELOADING=1\nMONOTONIC_USEC=") {
		t.Errorf("Reloading() = %q", r)
	}
	if got := Status("a\nb"); got != "STATUS=a b" {
		t.Errorf("Status = %q", got)
	}
}

func TestWatchdog(t *testing.T) {
	tests := []struct {
		name, usec, pid string
		want            time.Duration
		err             bool
	}{
		{"none", "", "", 0, false},
		{"half the timeout", "30000000", "", 15 * time.Second, false},
		{"for this pid", "2000000", "42", time.Second, false},
		{"for another pid", "2000000", "43", 0, false},
		{"zero", "0", "", 0, true},
		{"garbage", "soon", "", 0, true},
		{"bad pid", "1000", "x", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Watchdog(tc.usec, tc.pid, 42)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("Watchdog(%q, %q) = %v, %v; want %v, error %v", tc.usec, tc.pid, got, err, tc.want, tc.err)
			}
		})
	}
}
