package fleetspec

import (
	"slices"
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Host
		err      string // a part of the error; "" for none
	}{
		{"defaults", "h1=10.0.0.1, h2=10.0.0.2,h3=db3.example", []Host{
			{"h1", "10.0.0.1", 4222, 6222}, {"h2", "10.0.0.2", 4222, 6222}, {"h3", "db3.example", 4222, 6222}}, ""},
		{"ports", "a=127.0.0.1:14222,b=127.0.0.1:14223", []Host{
			{"a", "127.0.0.1", 14222, 16222}, {"b", "127.0.0.1", 14223, 16223}}, ""},
		{"ipv6", "a=::1,b=[::1]:5000", []Host{{"a", "::1", 4222, 6222}, {"b", "::1", 5000, 7000}}, ""},
		{"empty", " , ", nil, "no hosts"},
		{"no equals", "h1", nil, "want NAME=ADDR"},
		{"bad name", "h 1=10.0.0.1", nil, "host name"},
		{"no address", "h1=", nil, "no address"},
		{"bad port", "h1=10.0.0.1:70000", nil, "port"},
		{"port past routes", "h1=10.0.0.1:64000", nil, "PORT+2000"},
		{"unspecified", "h1=0.0.0.0", nil, "own IP"},
		{"bad address", "h1=not_a host", nil, "neither an IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHosts(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseHosts(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseHosts(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	hosts, _ := ParseHosts("h1=10.0.0.1,h2=10.0.0.2,h3=10.0.0.3")
	for _, tc := range []struct {
		name string
		spec Spec
		err  string
	}{
		{"ok", Spec{Hosts: hosts, Self: "h2", Dir: "/d"}, ""},
		{"sync always", Spec{Hosts: hosts, Self: "h2", Dir: "/d", Sync: "always"}, ""},
		{"no self", Spec{Hosts: hosts, Dir: "/d"}, "fleet-self: missing"},
		{"unknown self", Spec{Hosts: hosts, Self: "h9", Dir: "/d"}, `fleet-self: "h9" is not in`},
		{"no dir", Spec{Hosts: hosts, Self: "h1"}, "fleet-dir: missing"},
		{"bad sync", Spec{Hosts: hosts, Self: "h1", Dir: "/d", Sync: "sometimes"}, "fleet-sync"},
		{"duplicate name", Spec{Hosts: append(slices.Clone(hosts), hosts[0]), Self: "h1", Dir: "/d"}, "appears twice"},
		{"same address", Spec{Hosts: []Host{hosts[0], {"h4", "10.0.0.1", 4222, 6222}}, Self: "h1", Dir: "/d"}, "both use 10.0.0.1:4222"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestEnvRoundTrip(t *testing.T) {
	hosts, _ := ParseHosts("h1=10.0.0.1,h2=10.0.0.2:5000,h3=10.0.0.3")
	s := Spec{Hosts: hosts, Self: "h3", Dir: "/var/lib/log", Sync: SyncAlways}
	env := map[string]string{}
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	got, ok, err := FromEnv(func(k string) string { return env[k] })
	if !ok || err != nil || !slices.Equal(got.Hosts, s.Hosts) || got.Self != s.Self || got.Dir != s.Dir || got.Sync != s.Sync {
		t.Fatalf("FromEnv(Env()) = %+v, %v, %v; want %+v", got, ok, err, s)
	}
	if urls := got.ClientURLs(); urls[0] != "nats://10.0.0.3:4222" || len(urls) != 3 {
		t.Errorf("ClientURLs = %v: want this host's first", urls)
	}
	if _, ok, _ := FromEnv(func(string) string { return "" }); ok {
		t.Error("FromEnv with nothing set: ok, want no fleet")
	}
}

func TestReplicasAndWarning(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 3, 5: 3} {
		s := Spec{Hosts: make([]Host, n)}
		if got := s.Replicas(); got != want {
			t.Errorf("%d hosts: Replicas %d, want %d", n, got, want)
		}
		if (s.Warning() != "") != (n < 3) {
			t.Errorf("%d hosts: Warning %q", n, s.Warning())
		}
	}
}

func FuzzParseHosts(f *testing.F) {
	for _, s := range []string{"h1=10.0.0.1,h2=10.0.0.2", "a=[::1]:5000", "x=", "=", "a=b:c:d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHosts(s)
		if err != nil {
			return
		}
		// What parses writes back to a list that parses to the same hosts.
		again, err := ParseHosts(Spec{Hosts: hosts}.HostsString())
		if err != nil || !slices.Equal(again, hosts) {
			t.Fatalf("%q: parsed %v, written %q, parsed again %v, %v", s, hosts, Spec{Hosts: hosts}.HostsString(), again, err)
		}
	})
}
