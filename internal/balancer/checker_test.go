package balancer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCheckerFall: a live host leaves the nftables map only after Fall rounds in a row
// without its agent's answer (a late answer is not a dead host), at once when its agent
// says drain, and comes back with its next answer. The agents are real listeners on
// loopback that answer, say drain, or accept and stay silent; the rulesets go to `nft -c`
// (checked by the kernel, loaded nowhere).
func TestCheckerFall(t *testing.T) {
	nft := needNft(t)
	type answer int
	const (
		up answer = iota
		silent
		drain
	)
	for _, tc := range []struct {
		name string
		fall int
		// rounds: host b's agent, round after round; want: whether b is in the map after it.
		rounds []answer
		want   []bool
	}{
		{"one silent round is not a verdict", 0, []answer{up, silent, up, up}, []bool{true, true, true, true}},
		{"two silent rounds take it out", 0, []answer{up, silent, silent, up}, []bool{true, true, false, true}},
		{"fall 1: out at the first silence", 1, []answer{up, silent, up}, []bool{true, false, true}},
		{"drain: out at once", 0, []answer{up, drain, up}, []bool{true, false, true}},
		{"silent from the start: out at once", 0, []answer{silent, up}, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var round atomic.Int64 // the round the checker is in, counted by host a's agent
			agentA := listenAgent(t, func() string { round.Add(1); return "up 100%" })
			agentB := listenAgent(t, func() string {
				switch tc.rounds[min(int(round.Load())-1, len(tc.rounds)-1)] {
				case silent:
					return ""
				case drain:
					return "drain"
				}
				return "up 100%"
			})
			var mu sync.Mutex
			inMap := map[int]bool{} // round → b in the map after it
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ck := &Checker{
				Template: readTemplate(t, "nftables/balancer.nft"),
				Params:   NftParams{VIP: "10.9.9.1", Port: 80, HostPort: 3000},
				Hosts:    []string{"10.9.9.2", "10.9.9.3"}, Agents: []string{agentA, agentB},
				Interval: 150 * time.Millisecond, Fall: tc.fall,
				Nft: []string{nft, "-c"},
				OnLoad: func(live []NftHost) {
					mu.Lock()
					inMap[int(round.Load())] = slices.ContainsFunc(live, func(h NftHost) bool { return h.Addr == "10.9.9.3" })
					mu.Unlock()
				},
			}
			errc := make(chan error, 1)
			go func() { errc <- ck.Run(ctx) }()
			for round.Load() <= int64(len(tc.rounds)) {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			if err := <-errc; err != context.Canceled {
				t.Fatalf("checker: %v", err)
			}
			// The map after each round: the last load at or before it.
			mu.Lock()
			defer mu.Unlock()
			var got []bool
			cur := false
			for r := 1; r <= len(tc.rounds); r++ {
				if v, ok := inMap[r]; ok {
					cur = v
				}
				got = append(got, cur)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("b in the map after each round: %v, want %v (loads by round: %v)", got, tc.want, inMap)
			}
		})
	}
}

// TestCheckerClampsWeight: an agent's "up ready 2500%" reaches the map as MaxAgentWeight
// (256 %), as HAProxy caps it; the other host keeps its share. The ruleset goes to nft -c.
func TestCheckerClampsWeight(t *testing.T) {
	nft := needNft(t)
	agentA := listenAgent(t, func() string { return "up 100%" })
	agentB := listenAgent(t, func() string { return "up ready 2500%" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loads := make(chan []NftHost, 1)
	ck := &Checker{
		Template: readTemplate(t, "nftables/balancer.nft"),
		Params:   NftParams{VIP: "10.9.9.1", Port: 80, HostPort: 3000},
		Hosts:    []string{"10.9.9.2", "10.9.9.3"}, Agents: []string{agentA, agentB},
		Interval: time.Second, Nft: []string{nft, "-c"},
		OnLoad: func(live []NftHost) {
			select {
			case loads <- live:
			default:
			}
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- ck.Run(ctx) }()
	var live []NftHost
	select {
	case live = <-loads:
	case err := <-errc:
		t.Fatalf("checker: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no load in 30 s")
	}
	cancel()
	<-errc
	want := []NftHost{{Addr: "10.9.9.2", Weight: 100}, {Addr: "10.9.9.3", Weight: MaxAgentWeight}}
	if !slices.Equal(live, want) {
		t.Fatalf("live = %+v, want %+v", live, want)
	}
}

// listenAgent serves an agent on loopback until the test ends: each connection gets
// reply()'s line, or, for "", nothing until the asker gives up.
func listenAgent(t *testing.T, reply func() string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				if line := reply(); line != "" {
					fmt.Fprintf(c, "%s\n", line)
					return
				}
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				c.Read(make([]byte, 1)) // silent: until the checker closes its end
			})
		}
	})
	return ln.Addr().String()
}
