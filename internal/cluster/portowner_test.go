package cluster

import (
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const tcpTable = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0
   1: 00000000:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:0BB8 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3333 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:0BB9 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0
`

func TestListeningInodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table string
		port  int
		want  []string
	}{
		{"listening on 3000, any address; not the established one", tcpTable, 3000, []string{"1111", "2222"}},
		{"another port", tcpTable, 3001, []string{"4444"}},
		{"none", tcpTable, 8080, nil},
		{"tcp6", "  sl  local_address                         remote_address                        st\n   0: 00000000000000000000000000000000:0BB8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5555 1\n", 3000, []string{"5555"}},
		{"garbage", "header\nnot a table\n: : 0A\n", 3000, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := listeningInodes(strings.NewReader(tc.table), tc.port)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("listeningInodes = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func FuzzListeningInodes(f *testing.F) {
	f.Add(tcpTable, 3000)
	f.Add("h\n 0: :0BB8 x 0A a b c d e 1\n", 3000)
	f.Fuzz(func(t *testing.T, table string, port int) {
		got, _ := listeningInodes(strings.NewReader(table), port)
		for _, in := range got {
			if in == "" {
				t.Fatalf("an empty inode from %q", table)
			}
		}
	})
}

// TestPortOwners: a socket this process listens on is found, with this process's pid.
func TestPortOwners(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	owners, err := PortOwners(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(owners, func(o PortOwner) bool { return o.PID == os.Getpid() }) {
		t.Errorf("PortOwners(%d) = %+v, want this process (%d)", p, owners, os.Getpid())
	}
}

// TestStartRefusesServedPort: Start on an address another socket listens on fails with
// ErrPortServed, naming the holder's pid, before binding or starting anything.
func TestStartRefusesServedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(Config{Listen: ln.Addr().String(), Command: []string{"true"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(t.Context())
	if !errors.Is(err, ErrPortServed) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), "-share-port") {
		t.Errorf("Start on a served port: %v; want ErrPortServed naming pid %d and -share-port", err, os.Getpid())
	}
}

// TestPortAdvice: the way to free a port is the one that works for its holder. PM2's
// daemon was once told `supervisor kill -socket ~/.pm2/pub.sock`, which hangs.
func TestPortAdvice(t *testing.T) {
	for _, c := range []struct {
		name     string
		owners   []PortOwner
		who, fix string
		notInFix string
	}{
		{"PM2's God daemon, by its title", []PortOwner{{PID: 7, Comm: "PM2 v7.0.4: God", Control: "/root/.pm2/pub.sock"}},
			"PM2's daemon, pid 7", "pm2 delete APP", "supervisor kill"},
		{"PM2 by its sockets", []PortOwner{{PID: 8, Comm: "node", Control: "/home/u/.pm2/rpc.sock"}}, "PM2's daemon, pid 8", "pm2 kill", "supervisor kill"},
		{"a supervisor of ours", []PortOwner{{PID: 9, Comm: "supervisor", Control: "/run/onehost/supervisor.sock"}},
			"control socket /run/onehost/supervisor.sock", "supervisor kill -socket /run/onehost/supervisor.sock", ""},
		{"another program with a unix socket", []PortOwner{{PID: 10, Comm: "gunicorn", Control: "/run/gunicorn.sock"}}, "pid 10 (gunicorn)", "kill 10", "supervisor kill"},
		{"nginx", []PortOwner{{PID: 11, Comm: "nginx"}, {PID: 12, Comm: "nginx"}}, "pid 11 (nginx)", "kill 11", ""},
		{"unreadable", nil, "another process", "stop it", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			who, fix := portAdvice(c.owners)
			if !strings.Contains(who, c.who) || !strings.Contains(fix, c.fix) || (c.notInFix != "" && strings.Contains(fix, c.notInFix)) {
				t.Errorf("portAdvice = %q, %q; want %q and %q", who, fix, c.who, c.fix)
			}
		})
	}
}
