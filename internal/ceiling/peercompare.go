// Comparing our cluster with the peers measured in the same sweep, as ratios.

package ceiling

import "fmt"

// PeerComparison is our cluster against a peer at one N of one sweep, as ratios.
type PeerComparison struct {
	Workload string `json:"workload"`
	Peer     string `json:"peer"` // ModePM2 or ModeNginx
	N        int    `json:"n"`
	Ours     Run    `json:"ours"`
	Theirs   Run    `json:"theirs"`
	// RPSRatio is our req/s ÷ the peer's: above 1 we served more. CPURatio is our server
	// CPU per request ÷ the peer's: below 1 we spent less. BytesRatio is our response
	// bytes per request ÷ the peer's (the payloads need not match byte for byte). 0: not
	// comparable (a run skipped or empty).
	RPSRatio   float64 `json:"rps_ratio"`
	CPURatio   float64 `json:"cpu_ratio"`
	BytesRatio float64 `json:"bytes_ratio"`
}

// ComparePeers pairs each peer run of the sweep (unshaped) with the cluster's run of the
// same workload and N, in the order of the peer runs: the cluster's run of the same round
// where runs of several rounds are given (a -repeat sweep's raw runs: each round's peer
// against that round's cluster), else its one run there (medians: a cell's one run).
// A peer run with no cluster run beside it, or skipped, is still listed, with zero ratios.
func ComparePeers(runs []Run) []PeerComparison {
	byRound, ours := make(map[string]Run), make(map[string]Run)
	key := func(r Run) string { return fmt.Sprintf("%s/%d", r.Workload, r.N) }
	roundKey := func(r Run) string { return fmt.Sprintf("%s/%d/%d", r.Workload, r.N, r.Round) }
	for _, r := range runs {
		if r.Mode == ModeCluster && r.Purpose == PurposeSweep && r.LinkBitsPerS == 0 {
			byRound[roundKey(r)] = r
			if prev, ok := ours[key(r)]; !ok || prev.Skipped != "" {
				ours[key(r)] = r
			}
		}
	}
	ratio := func(a, b float64) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return round(a/b, 3)
	}
	var out []PeerComparison
	for _, r := range runs {
		if !isPeer(r.Mode) || r.Purpose != PurposeSweep || r.LinkBitsPerS != 0 {
			continue
		}
		c := PeerComparison{Workload: r.Workload, Peer: r.Mode, N: r.N, Theirs: r}
		o, ok := byRound[roundKey(r)]
		if !ok {
			o, ok = ours[key(r)]
		}
		if ok {
			c.Ours = o
			if o.Skipped == "" && r.Skipped == "" {
				c.RPSRatio = ratio(o.RPS, r.RPS)
				c.CPURatio = ratio(o.ServerCPUUsPerReq, r.ServerCPUUsPerReq)
				c.BytesRatio = ratio(o.BytesPerReq, r.BytesPerReq)
			}
		}
		out = append(out, c)
	}
	return out
}

// Line is the comparison in one line: peer=pm2 workload=heavy n=2 rps_ratio=... .
func (c PeerComparison) Line() string {
	if c.Theirs.Skipped != "" {
		return fmt.Sprintf("peer=%s workload=%s n=%d skipped=%q", c.Peer, c.Workload, c.N, c.Theirs.Skipped)
	}
	return fmt.Sprintf("peer=%s workload=%s n=%d rps_ratio=%.2f cpu_us_ratio=%.2f bytes_ratio=%.2f ours=%.0f/%.1fus/%s theirs=%.0f/%.1fus/%s",
		c.Peer, c.Workload, c.N, c.RPSRatio, c.CPURatio, c.BytesRatio, c.Ours.RPS, c.Ours.ServerCPUUsPerReq, or(c.Ours.Verdict, "-"),
		c.Theirs.RPS, c.Theirs.ServerCPUUsPerReq, or(c.Theirs.Verdict, "-"))
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// peerName is a peer's name in the report and the plots: of workload's peer, where
// PM2 runs the user's own app rather than the Fastify heavy PATCH.
func peerName(mode, workload string) string {
	switch {
	case mode == ModePM2 && workload == AppWorkload:
		return "PM2 cluster (the same app)"
	case mode == ModePM2:
		return "PM2 cluster + Fastify"
	case mode == ModeNginx:
		return "nginx"
	case mode == ModePM2Compress:
		return "PM2 cluster + Fastify + @fastify/compress"
	case mode == ModeNginxGzip:
		return "nginx gzip on"
	}
	return mode
}
