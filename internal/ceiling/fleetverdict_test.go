package ceiling

import (
	"strings"
	"testing"
)

// TestJudgeBalancer: a fleet's run is judged balancer when HAProxy's cores are full, after
// the generator and fd and before the servers' cpu; kernel balancers (no cores given) and
// a balancer with room are not.
func TestJudgeBalancer(t *testing.T) {
	// Two hosts at 0.4 of a core each, half busy; HAProxy on one core.
	calm := Evidence{ServerBusyCores: 0.4, ServerCores: 1, ServerCoreLimit: 0.8, HostIdlePct: 50,
		GenBusyCores: 0.3, GenThreads: 1, Requests: 10000, P99Ms: 3, BalancerCores: 1, BalancerBusyCores: 0.5}
	with := func(f func(*Evidence)) Evidence { e := calm; f(&e); return e }
	for _, tc := range []struct {
		name         string
		e            Evidence
		want         string
		wantEvidence string
	}{
		{"balancer with room", calm, VerdictUnclear, "server CPU 40% of 80%"},
		{"balancer full", with(func(e *Evidence) { e.BalancerBusyCores = 0.95 }), VerdictBalancer,
			"balancer CPU 95% of 100% (server CPU 40% of 80%)"},
		{"balancer just under", with(func(e *Evidence) { e.BalancerBusyCores = 0.85 }), VerdictUnclear, ""},
		{"balancer on a quota", with(func(e *Evidence) { e.BalancerCores, e.BalancerBusyCores = 0.5, 0.47 }), VerdictBalancer,
			"balancer CPU 47% of 50%"},
		{"balancer and servers full: balancer", with(func(e *Evidence) { e.BalancerBusyCores, e.ServerBusyCores = 0.97, 0.79 }),
			VerdictBalancer, "server CPU 79% of 80%"},
		{"servers full under their quotas", with(func(e *Evidence) { e.ServerBusyCores = 0.78 }), VerdictCPU, "server CPU 78% of 80%"},
		{"no balancer process (nftables, none)", with(func(e *Evidence) { e.BalancerCores, e.BalancerBusyCores = 0, 0 }), VerdictUnclear, ""},
		{"failed connects before the balancer", with(func(e *Evidence) { e.BalancerBusyCores, e.ConnectErrors = 1, 500 }), VerdictFD, ""},
		{"generator saturated before the balancer", with(func(e *Evidence) {
			e.BalancerBusyCores, e.GenSaturated, e.GenReason = 1, true, "CPU 99% of 1 CPU at 2 s"
		}), VerdictGenerator, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ev := Judge(tc.e, Thresholds{})
			if v != tc.want || !strings.Contains(ev, tc.wantEvidence) {
				t.Errorf("Judge = %s %q, want %s containing %q", v, ev, tc.want, tc.wantEvidence)
			}
		})
	}
}
