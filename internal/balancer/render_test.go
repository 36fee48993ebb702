package balancer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/proctest"
)

func readTemplate(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func needHAProxy(t testing.TB) string {
	t.Helper()
	bin, err := LookHAProxy()
	if err != nil {
		proctest.Missing(t, err.Error())
	}
	return bin
}

func needNft(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		proctest.Missing(t, "nft -c needs root (CAP_NET_ADMIN) to have the kernel check a ruleset")
	}
	bin, err := LookNft()
	if err != nil {
		proctest.Missing(t, err.Error())
	}
	return bin
}

var twoHosts = []Server{{Addr: "10.233.0.6:3000"}, {Addr: "10.233.0.10:3000"}}

// TestRenderHAProxy renders the template with each balance and a full set of parameters,
// compares with the golden files and has haproxy -c check each.
func TestRenderHAProxy(t *testing.T) {
	tmpl := readTemplate(t, "haproxy/haproxy.cfg")
	for _, tc := range []struct {
		name string
		p    HAProxyParams
	}{
		{"defaults", HAProxyParams{Servers: twoHosts}},
		{"leastconn", HAProxyParams{
			Listen: "10.233.0.2:80", Balance: "leastconn", AgentPort: 3001, Threads: 2,
			CheckInter: 500 * time.Millisecond, AgentInter: 250 * time.Millisecond, Retries: 5,
			BufSize: 32768, MaxConn: 1000, HealthPath: "/health",
			StatsSocket: "/tmp/x/admin.sock", StateFile: "/tmp/x/state", StatsGroup: "adm",
			Servers: []Server{{Name: "a", Addr: "10.233.0.6:3000"}, {Name: "b", Addr: "10.233.0.10:3000", AgentAddr: "10.233.0.1", AgentPort: 4000}},
		}},
		// What StartHAProxy renders for a non-root user; the product's default is above.
		{"keep-privileges", HAProxyParams{Servers: twoHosts, KeepPrivileges: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := RenderHAProxy(tmpl, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			goldentest.Check(t, "haproxy-"+tc.name+".cfg", out)
			bin := needHAProxy(t)
			path := filepath.Join(t.TempDir(), "haproxy.cfg")
			os.WriteFile(path, out, 0o600)
			if err := CheckHAProxy(context.Background(), bin, path); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRenderHAProxyErrors: a wrong value names its field.
func TestRenderHAProxyErrors(t *testing.T) {
	tmpl := readTemplate(t, "haproxy/haproxy.cfg")
	for _, tc := range []struct {
		name, want string
		p          HAProxyParams
	}{
		{"no servers", "no Servers", HAProxyParams{}},
		{"balance", `Balance "random"`, HAProxyParams{Servers: twoHosts, Balance: "random"}},
		{"addr", `Servers[0].Addr "10.0.0.1"`, HAProxyParams{Servers: []Server{{Addr: "10.0.0.1"}}}},
		{"name", `Servers[1].Name "a b"`, HAProxyParams{Servers: []Server{{Addr: "a:1"}, {Name: "a b", Addr: "b:1"}}}},
		{"twice", `Servers[1].Name "h0" is used twice`, HAProxyParams{Servers: []Server{{Addr: "a:1"}, {Name: "h0", Addr: "b:1"}}}},
		{"relative socket", `StatsSocket "admin.sock"`, HAProxyParams{Servers: twoHosts, StatsSocket: "admin.sock"}},
		{"space in path", `StateFile "/var/lib/x y"`, HAProxyParams{Servers: twoHosts, StateFile: "/var/lib/x y"}},
		{"newline in chroot", `Chroot "/var/empty\nuser root"`, HAProxyParams{Servers: twoHosts, Chroot: "/var/empty\nuser root"}},
		{"relative chroot", `Chroot "empty"`, HAProxyParams{Servers: twoHosts, Chroot: "empty"}},
		{"user", `User "root\n"`, HAProxyParams{Servers: twoHosts, User: "root\n"}},
		{"group", `Group "a b"`, HAProxyParams{Servers: twoHosts, Group: "a b"}},
		{"stats group", `StatsGroup "adm mode 666"`, HAProxyParams{Servers: twoHosts, StatsGroup: "adm mode 666"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RenderHAProxy(tmpl, tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := RenderHAProxy([]byte("bind @LSTEN@"), HAProxyParams{Servers: twoHosts}); err == nil || !strings.Contains(err.Error(), "@LSTEN@") {
		t.Errorf("unknown placeholder: err = %v", err)
	}
}

// TestRenderNft renders the ruleset with two live hosts, weights, and none, compares with
// the golden files and has the kernel check each (nft -c).
func TestRenderNft(t *testing.T) {
	tmpl := readTemplate(t, "nftables/balancer.nft")
	for _, tc := range []struct {
		name string
		p    NftParams
	}{
		{"two", NftParams{VIP: "10.233.0.2", Port: 80, HostPort: 3000, Live: []NftHost{{Addr: "10.233.0.6"}, {Addr: "10.233.0.10"}}}},
		{"weighted", NftParams{VIP: "10.233.0.2", Port: 3000, Live: []NftHost{{Addr: "10.233.0.6", Weight: 50}, {Addr: "10.233.0.10", Weight: 100}}}},
		{"none", NftParams{VIP: "10.233.0.2", Port: 80}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := RenderNft(tmpl, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			goldentest.Check(t, "balancer-"+tc.name+".nft", out)
			bin := needNft(t)
			if err := CheckNft(context.Background(), []string{bin}, out); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, tc := range []struct {
		name, want string
		p          NftParams
	}{
		{"vip", `VIP "x"`, NftParams{VIP: "x", Port: 80}},
		{"port", "Port 0", NftParams{VIP: "10.0.0.1"}},
		{"host", `Live[0].Addr "::1"`, NftParams{VIP: "10.0.0.1", Port: 80, Live: []NftHost{{Addr: "::1"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := RenderNft(tmpl, tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestRenderNftWeightBound: a host's weight deals it at most round(256/25) = 10 map
// entries, whatever it says; before the bound, 25,000,000 % dealt it a million (an 18.9 MB
// ruleset) and 2500 % 100 entries (96 % of the map beside a host at 100 %).
func TestRenderNftWeightBound(t *testing.T) {
	tmpl := readTemplate(t, "nftables/balancer.nft")
	for _, w := range []int{256, 2500, 25_000_000} {
		out, err := RenderNft(tmpl, NftParams{VIP: "10.233.0.2", Port: 80,
			Live: []NftHost{{Addr: "10.233.0.6"}, {Addr: "10.233.0.10", Weight: w}}})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := strings.Count(string(out), ": 10.233.0.6"), strings.Count(string(out), ": 10.233.0.10"); a != 4 || b != 10 {
			t.Errorf("weight %d%%: %d entries for the host at 100%%, %d for it; want 4 and 10", w, a, b)
		}
	}
}

// TestCheckCatchesMistakes: the checks reject a broken file, so a passing check means
// something.
func TestCheckCatchesMistakes(t *testing.T) {
	t.Run("haproxy", func(t *testing.T) {
		bin := needHAProxy(t)
		path := filepath.Join(t.TempDir(), "bad.cfg")
		os.WriteFile(path, []byte("backend hosts\n    balance nosuch\n"), 0o600)
		if err := CheckHAProxy(context.Background(), bin, path); err == nil {
			t.Fatal("haproxy -c accepted an unknown balance")
		}
	})
	t.Run("nft", func(t *testing.T) {
		bin := needNft(t)
		if err := CheckNft(context.Background(), []string{bin}, []byte("table ip t { chain c { tcp dport 80 dnat to 300.1.1.1 } }\n")); err == nil {
			t.Fatal("nft -c accepted a bad address")
		}
	})
}

func TestParseAgentReply(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       AgentState
		err        bool
	}{
		{"up with weight", "up 50%\n", AgentState{Live: true, Weight: 50}, false},
		{"ready", "ready\r\n", AgentState{Live: true, Weight: 100}, false},
		{"ready up weight", "ready up 75%", AgentState{Live: true, Weight: 75}, false},
		{"drain", "drain\n", AgentState{Live: false, Weight: 100}, false},
		{"down with reason", "DOWN#maintenance window\n", AgentState{Live: false, Weight: 100}, false},
		{"maint", "maint", AgentState{Live: false, Weight: 100}, false},
		{"zero weight", "up 0%", AgentState{Live: false, Weight: 0}, false},
		{"commas", "up,maxconn:30,25%", AgentState{Live: true, Weight: 25}, false},
		{"drain wins", "up drain", AgentState{Live: false, Weight: 100}, false},
		{"empty", "\n", AgentState{}, true},
		{"gibberish", "hello there", AgentState{}, true},
		{"bad weight", "up x%", AgentState{}, true},
		{"negative weight", "up -5%", AgentState{}, true},
		{"plus sign", "up +30%", AgentState{Live: true, Weight: 30}, false},
		{"256 is the most", "up 256%", AgentState{Live: true, Weight: 256}, false},
		{"2500% clamped", "up ready 2500%", AgentState{Live: true, Weight: MaxAgentWeight}, false},
		{"25000000% clamped", "up ready 25000000%", AgentState{Live: true, Weight: MaxAgentWeight}, false},
		{"past any integer clamped", "up 99999999999999999999999999%", AgentState{Live: true, Weight: MaxAgentWeight}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAgentReply(tc.line)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseAgentReply(%q) = %+v, %v; want %+v, error %v", tc.line, got, err, tc.want, tc.err)
			}
		})
	}
}

func FuzzParseAgentReply(f *testing.F) {
	for _, s := range []string{"up 50%\n", "drain", "ready up 75%", "down#x", "maxconn:3,10%", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseAgentReply(s)
		if err == nil && st.Live && st.Weight <= 0 {
			t.Fatalf("%q: live with weight %d", s, st.Weight)
		}
		if st.Weight < 0 || st.Weight > MaxAgentWeight {
			t.Fatalf("%q: weight %d, want 0..%d", s, st.Weight, MaxAgentWeight)
		}
	})
}

const statSample = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act\n" +
	"fleet,FRONTEND,,,1,2,20000,10,,,,,,,,,,OPEN,,\n" +
	"hosts,h0,0,0,1,2,,7,0,0,,0,,0,0,1,1,UP,100,1\n" +
	"hosts,h1,0,0,0,1,,3,0,0,,0,,0,0,0,0,DRAIN,0,1\n" +
	"hosts,BACKEND,0,0,1,2,2000,10,0,0,0,0,,0,0,1,1,UP,100,2\n\n"

func TestParseStat(t *testing.T) {
	got, err := ParseStat(statSample)
	if err != nil {
		t.Fatal(err)
	}
	want := []ServerStat{{Name: "h0", Status: "UP", Weight: 100, Scur: 1, Stot: 7, Retr: 1, Redis: 1}, {Name: "h1", Status: "DRAIN", Stot: 3}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ParseStat = %+v, want %+v", got, want)
	}
	// With agent_status (HAProxy 2.6 has it; the sample above stands for one without).
	got, err = ParseStat("# pxname,svname,scur,stot,wretr,wredis,status,weight,agent_status\nhosts,h0,0,1,0,0,UP,100,L7OK\n")
	if err != nil || len(got) != 1 || got[0].AgentStatus != "L7OK" {
		t.Fatalf("ParseStat with agent_status = %+v, %v; want h0's agent L7OK", got, err)
	}
	if _, err := ParseStat("# pxname,svname\n"); err == nil {
		t.Error("ParseStat accepted a header without scur")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add(statSample)
	f.Add("# a,b\n1,2\n")
	f.Fuzz(func(t *testing.T, s string) { ParseStat(s) })
}

// TestAskAgent reads a real agent's line, and an agent that is not there is an error.
func TestAskAgent(t *testing.T) {
	a := startAgent(t, "127.0.0.1:0", "ready up 60%")
	st, err := AskAgent(context.Background(), a.addr(), time.Second)
	if err != nil || st != (AgentState{Live: true, Weight: 60}) {
		t.Fatalf("AskAgent = %+v, %v", st, err)
	}
	addr := a.addr()
	a.ln.Close()
	<-a.done
	if _, err := AskAgent(context.Background(), addr, time.Second); err == nil {
		t.Fatal("AskAgent of a closed port: no error")
	}
}
