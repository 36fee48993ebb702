package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/ceiling"
	"github.com/onehost/onehost/internal/fleetns/fleetnstest"
	"github.com/onehost/onehost/internal/progress"
	"github.com/onehost/onehost/internal/seedtest"
)

// TestFleetCeiling runs `ceiling fleet` on two namespace hosts (each its own cluster in a
// CPU quota where the machine allows one) behind HAProxy, nftables and none, one short
// hello run each: every run has requests, no errors, a verdict, and the balancer's CPU
// (HAProxy's tree; softirq for every balancer) recorded. Root, haproxy, nft, ip and nsenter:
// skipped without them like internal/balancer's TestFleet (failed under
// ONEHOST_REQUIRE_PROGRAMS=1).
func TestFleetCeiling(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the cluster and the generator and runs a fleet")
	}
	fleetnstest.Check(t)
	needHAProxy(t)
	needNft(t)
	dir := t.TempDir()
	buildTools(t, dir, "cmd/worker", "cmd/supervisor", "bench/autocannon")
	seed := seedtest.Path(t)
	res := filepath.Join(dir, "results")
	// A quota needs a cgroup cpu controller; without one the hosts run unlimited.
	quota := "0.4"
	if ceilingQuotaMissing() {
		quota = "0"
	}
	out := runCeiling(t, "fleet", "-hosts", "2", "-n", "1", "-workloads", "hello", "-d", "1s", "-warmup", "0",
		"-balancers", "haproxy,nftables,none", "-host-quota", quota, "-host-cpus", "", "-balancer-cpus", "", "-gen-cpus", "",
		"-conns-per-host", "4", "-out", res, "-seed", seed, "-config", "../../configs/cluster.yaml",
		"-haproxy-template", "../../configs/haproxy/haproxy.cfg", "-nft-template", "../../configs/nftables/balancer.nft",
		"-supervisor", filepath.Join(dir, "supervisor"), "-worker", filepath.Join(dir, "worker"), "-autocannon", filepath.Join(dir, "autocannon"))
	for _, b := range []string{"haproxy", "nftables", "none"} {
		if !strings.Contains(out, "workload=hello balancer="+b+" hosts=2 n=1 rps=") {
			t.Errorf("output lacks the %s run's line", b)
		}
	}
	if !strings.Contains(out, "limit workload=hello balancer=haproxy balancer: ") {
		t.Errorf("output lacks the limit line")
	}
	b, err := os.ReadFile(filepath.Join(res, "fleet", "ceiling.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runs   []ceiling.FleetRun
		Limits []ceiling.FleetLimit
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Runs) != 3 || len(got.Limits) != 3 {
		t.Fatalf("%d runs, %d limits; want 3 each", len(got.Runs), len(got.Limits))
	}
	for _, r := range got.Runs {
		if r.Skipped != "" || r.Requests == 0 || r.Errors+r.Non2xx != 0 || r.Verdict == "" || r.Hosts != 2 {
			t.Errorf("%s: skipped %q, %d requests, %d errors, %d non-2xx, verdict %q, %d hosts",
				r.Balancer, r.Skipped, r.Requests, r.Errors, r.Non2xx, r.Verdict, r.Hosts)
		}
		if r.ServerBusyCores <= 0 || r.ServerUsPerReq <= 0 || r.LinkBytesPerReq <= 0 || r.SoftIRQUsPerReq < 0 {
			t.Errorf("%s: servers %v cores, %v µs/req, link %v bytes/req, softirq %v µs/req: want the servers' CPU and the link's bytes",
				r.Balancer, r.ServerBusyCores, r.ServerUsPerReq, r.LinkBytesPerReq, r.SoftIRQUsPerReq)
		}
		if r.Balancer == "haproxy" && (r.BalancerBusyCores <= 0 || r.BalancerUsPerReq <= 0 || r.BalancerCores <= 0) {
			t.Errorf("haproxy: balancer %v of %v cores, %v µs/req: want HAProxy's CPU recorded", r.BalancerBusyCores, r.BalancerCores, r.BalancerUsPerReq)
		}
	}
	// The plots beside ceiling.json, and progress.json left saying done (what the
	// supervisor's dashboard reads from DIR).
	for _, n := range []string{"fleet-throughput-hello.svg", "fleet-cpu-per-request.svg"} {
		if b, err := os.ReadFile(filepath.Join(res, "fleet", n)); err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("plot %s: %v", n, err)
		}
	}
	var prog progress.File
	if b, err := os.ReadFile(filepath.Join(res, "fleet", progress.FileName)); err != nil || json.Unmarshal(b, &prog) != nil {
		t.Errorf("progress.json: %v", err)
	} else if prog.State != progress.Done || prog.Kind != progress.KindFleet || prog.RunsDone != 3 || prog.Last == nil || prog.Last.Hosts != 2 {
		t.Errorf("progress %+v, want a fleet's, done after 3 runs, the last on 2 hosts", prog)
	}
	// -replot draws them again from ceiling.json alone.
	os.Remove(filepath.Join(res, "fleet", "fleet-cpu-per-request.svg"))
	if out := runCeiling(t, "fleet", "-replot", filepath.Join(res, "fleet", "ceiling.json")); !strings.Contains(out, "fleet-cpu-per-request.svg") {
		t.Errorf("-replot: %s", out)
	}
}

// ceilingQuotaMissing reports whether this machine lacks a cgroup cpu controller.
func ceilingQuotaMissing() bool {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		b, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		return !strings.Contains(string(b), "cpu")
	}
	_, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	return err != nil
}

// TestFleetReplotNotAFleet: -replot of a sweep's ceiling.json (no cells) says what it wants.
func TestFleetReplotNotAFleet(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ceiling.json")
	if err := os.WriteFile(p, []byte(`{"machine": {}, "runs": [{"workload": "hello", "mode": "cluster", "n": 1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"fleet", "-replot", p}, func(string) string { return "" }, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "has no cells: is it a `ceiling fleet` ceiling.json?") {
		t.Errorf("got %v, want the file named as not a fleet's", err)
	}
}
