package ceiling

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
)

// ReportConfig says what the model report predicts. The zero value predicts 12 cores
// behind 10 GbE, tables up to 64 cores, links of 1, 10, 25 and 100 GbE, and tests the
// extrapolation from N ≤ 2.
type ReportConfig struct {
	Cores    int     // default 12
	LinkBits float64 // default 10e9
	MaxCores int     // default 64
	Links    []float64
	FitMaxN  int // the extrapolation check fits on N ≤ FitMaxN; default DefaultFitMaxN (2)
}

func (c ReportConfig) withDefaults() ReportConfig {
	if c.Cores <= 0 {
		c.Cores = 12
	}
	if c.LinkBits <= 0 {
		c.LinkBits = 10e9
	}
	if c.MaxCores <= 0 {
		c.MaxCores = 64
	}
	if len(c.Links) == 0 {
		c.Links = []float64{1e9, 10e9, 25e9, 100e9}
	}
	if c.FitMaxN <= 0 {
		c.FitMaxN = DefaultFitMaxN
	}
	return c
}

// tableCores are the rows of the prediction table.
var tableCores = []int{1, 2, 4, 8, 12, 16, 24, 32, 48, 64}

// WriteReport prints the fitted models, their predictions, the core count where each
// link becomes the ceiling, the error against every measured run (in-sample and
// leave-one-out), the extrapolation test (fit on N ≤ FitMaxN, predict the larger N), and
// the comparison with the article's published 12-core run.
func WriteReport(w io.Writer, runs []Run, machines []Machine, cfg ReportConfig) error {
	cfg = cfg.withDefaults()
	b := bufio.NewWriter(w)
	runs = MedianRuns(runs)
	models := Fit(runs)
	writeModels(b, models, runs, machines)
	writePrediction(b, models, cfg)
	writeCrossovers(b, models, cfg)
	writePredictionTables(b, models, cfg)

	v := Validate(runs, cfg.FitMaxN)
	writeChecks(b, models, runs, v)
	writeExtrapolation(b, v)

	var own []Run // the peers and the article compare the sweep's own runs only
	for _, r := range runs {
		if r.Source == "" {
			own = append(own, r)
		}
	}
	writePeers(b, own)
	writePublished(b, models)
	return b.Flush()
}

// writeModels prints the report's title, the machines measured on, and the fitted models.
func writeModels(b *bufio.Writer, models []Model, runs []Run, machines []Machine) {
	fmt.Fprintf(b, "# Ceiling model\n\n")
	seen := make(map[Machine]bool)
	for _, m := range machines {
		if !seen[m] {
			seen[m] = true
			fmt.Fprintf(b, "Measured on: %s, %d cores (%d allowed), kernel %s\n", m.CPUModel, m.Cores, m.Allowed, m.Kernel)
		}
	}
	fmt.Fprintf(b, "\nrps(n) = min(n x 1e6 / cpu_us x e1 / (1 + alpha (n - n1)), link bytes/s / (bytes/req x %.4f))\n\n", WireFactor)
	fmt.Fprintln(b, "| workload | mode | CPU µs/req at n1 | n1 | e1 | alpha | bytes/req | loopback bytes/req | generator µs/req | points | terms |")
	fmt.Fprintln(b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
	unknownBytes := false
	for _, m := range models {
		bytes, lo := fmt.Sprintf("%.0f", m.BytesPerReq), fmt.Sprintf("%.0f", m.LoBytesPerReq)
		if !m.LinkKnown() {
			bytes, lo, unknownBytes = "unknown", "unknown", true
		}
		fmt.Fprintf(b, "| %s | %s | %.1f | %d | %.2f | %.3f | %s | %s | %s | %v | %s |\n", m.Name(), m.Mode,
			m.CPUUsPerReq, m.N1, m.E1, m.Alpha, bytes, lo, orUnknown(m.GenUsPerReq, "%.1f"), m.Points, m.TermsText())
	}
	if k := maxRepeats(runs); k > 1 {
		fmt.Fprintf(b, "\nRepeated runs: each cell is its median run by req/s (up to %d runs a cell; runs judged host-busy, generator or fd left out where the cell has others); the spread is beside it in the table of measured runs.\n", k)
	}
	if unknownBytes {
		fmt.Fprintln(b, "\nBytes per request \"unknown\": those runs (bench/scale.sh CSVs) did not record them, so no link limit applies to their models and no NIC ceiling is predicted for them.")
	}
}

// writePrediction prints each cluster model's prediction at cfg.Cores behind cfg.LinkBits.
func writePrediction(b *bufio.Writer, models []Model, cfg ReportConfig) {
	link := Link{BitsPerS: cfg.LinkBits}
	fmt.Fprintf(b, "\n## Prediction: %d cores behind %s (cluster)\n\n", cfg.Cores, linkName(cfg.LinkBits))
	if maxN := maxClusterN(models); maxN > 0 && cfg.Cores > maxN {
		fmt.Fprintf(b, "%d cores is beyond the largest N measured (%d): an extrapolation. How far the model's extrapolations miss, where it can be told, is in \"Extrapolation\" below and in docs/ceiling.md.\n\n", cfg.Cores, maxN)
	}
	fmt.Fprintln(b, "| workload | req/s | limit | CPU limit | link limit | payload | generator cores needed | fit from |")
	fmt.Fprintln(b, "|---|---:|---|---:|---:|---:|---:|---|")
	for _, m := range models {
		if m.Mode != ModeCluster {
			continue
		}
		p := m.Predict(cfg.Cores, link)
		if m.NoPrediction != "" {
			fmt.Fprintf(b, "| %s | no prediction | %s: %s | - | - | - | - | %s |\n", m.Name(), m.NoPrediction, RemeasureHint, m.TermsText())
			continue
		}
		if p.LinkUnknown {
			fmt.Fprintf(b, "| %s | %.0f | %s (link n/a) | %.0f | n/a: bytes unknown | - | %s | %s |\n", m.Name(), p.RPS, p.Limit, p.CPULimit,
				orUnknown(p.GenCores, "%.1f"), m.TermsText())
			continue
		}
		fmt.Fprintf(b, "| %s | %.0f | %s | %.0f | %.0f | %s | %.1f | %s |\n", m.Name(), p.RPS, p.Limit, p.CPULimit,
			p.LinkLimit, rate(p.BytesPerS), p.GenCores, m.TermsText())
	}
}

// linkColumns are the header and separator of a table with a column per link.
func linkColumns(links []float64) (head, sep string) {
	head = "| workload |"
	sep = "|---|"
	for _, l := range links {
		head += " " + linkName(l) + " |"
		sep += "---:|"
	}
	return head, sep
}

// writeCrossovers prints, for each cluster model, the core count at which each link
// becomes the ceiling.
func writeCrossovers(b *bufio.Writer, models []Model, cfg ReportConfig) {
	fmt.Fprintf(b, "\n## Cores at which the NIC becomes the ceiling (cluster, up to %d cores)\n\n", cfg.MaxCores)
	head, sep := linkColumns(cfg.Links)
	fmt.Fprintln(b, head)
	fmt.Fprintln(b, sep)
	for _, m := range models {
		if m.Mode != ModeCluster {
			continue
		}
		row := "| " + m.Name() + " |"
		for _, l := range cfg.Links {
			if m.NoPrediction != "" {
				row += " no prediction |"
				continue
			}
			if !m.LinkKnown() {
				row += " unknown (bytes not measured) |"
				continue
			}
			if n := m.Crossover(Link{BitsPerS: l}, cfg.MaxCores); n > 0 {
				row += fmt.Sprintf(" %d |", n)
			} else {
				row += fmt.Sprintf(" never (CPU: %s at %d) |", shortNum(m.CPULimit(float64(cfg.MaxCores))), cfg.MaxCores)
			}
		}
		fmt.Fprintln(b, row)
	}
}

// writePredictionTables prints each cluster model's predicted req/s by cores and link.
func writePredictionTables(b *bufio.Writer, models []Model, cfg ReportConfig) {
	head, sep := linkColumns(cfg.Links)
	for _, m := range models {
		if m.Mode != ModeCluster {
			continue
		}
		fmt.Fprintf(b, "\n### %s: predicted req/s (N = the NIC limits)\n\n", m.Name())
		if len(m.Terms) > 0 {
			fmt.Fprintf(b, "Fit from: %s.\n\n", m.TermsText())
		}
		if m.NoPrediction != "" {
			fmt.Fprintf(b, "No prediction: %s; %s.\n", m.NoPrediction, RemeasureHint)
			continue
		}
		if !m.LinkKnown() {
			fmt.Fprintln(b, "Bytes per request unknown: CPU limit only, no link applies.")
			fmt.Fprintln(b)
			fmt.Fprintln(b, "| cores | CPU limit |")
			fmt.Fprintln(b, "|---:|---:|")
			for _, n := range tableCores {
				if n <= cfg.MaxCores {
					fmt.Fprintf(b, "| %d | %s |\n", n, shortNum(m.CPULimit(float64(n))))
				}
			}
			continue
		}
		fmt.Fprintln(b, "| cores | no link |"+head[len("| workload |"):])
		fmt.Fprintln(b, "|---:"+sep[len("|---"):]+"---:|")
		for _, n := range tableCores {
			if n > cfg.MaxCores {
				break
			}
			row := fmt.Sprintf("| %d | %s |", n, shortNum(m.CPULimit(float64(n))))
			for _, l := range cfg.Links {
				p := m.Predict(n, Link{BitsPerS: l})
				mark := ""
				if p.Limit == VerdictNIC {
					mark = " N"
				}
				row += " " + shortNum(p.RPS) + mark + " |"
			}
			fmt.Fprintln(b, row)
		}
	}
}

// maxRepeats is the most runs any median run stands for (1: none repeated).
func maxRepeats(runs []Run) int {
	k := 1
	for _, r := range runs {
		if r.Spread != nil {
			k = max(k, r.Spread.Runs+r.Spread.Disturbed)
		}
	}
	return k
}

// orUnknown formats v, or says "unknown" when it was not measured (0).
func orUnknown(v float64, format string) string {
	if v <= 0 {
		return "unknown"
	}
	return fmt.Sprintf(format, v)
}

// maxClusterN is the largest N any cluster model was fitted on.
func maxClusterN(models []Model) int {
	n := 0
	for _, m := range models {
		if m.Mode == ModeCluster {
			for _, p := range m.Points {
				n = max(n, p)
			}
		}
	}
	return n
}

// writePeers is the peers table: our cluster against PM2 (heavy) and nginx (static) at
// each N of the same sweep, as ratios.
func writePeers(b *bufio.Writer, runs []Run) {
	cs := ComparePeers(runs)
	fmt.Fprintf(b, "\n## Peers in the same run\n\n")
	if len(cs) == 0 {
		fmt.Fprintln(b, "No peer runs: PM2 (heavy) and nginx (static) were not requested or not installed (the sweep's notes say which).")
		return
	}
	fmt.Fprintln(b, "Same sweep, same N, generator, pinning and connections. Ratios are ours ÷ the peer's (in brackets: ours / theirs):")
	fmt.Fprintln(b, "req/s above 1 means our cluster served more; CPU µs per request below 1 means it spent less per request.")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| workload | peer | n | req/s ratio | CPU µs/req ratio | bytes/req ratio | verdict: ours / peer |")
	fmt.Fprintln(b, "|---|---|---:|---:|---:|---:|---|")
	for _, c := range cs {
		if c.Theirs.Skipped != "" || c.Ours.Skipped != "" || c.Ours.Workload == "" {
			why := "no cluster run at this N"
			switch {
			case c.Theirs.Skipped != "":
				why = "peer skipped: " + c.Theirs.Skipped
			case c.Ours.Skipped != "":
				why = "cluster skipped: " + c.Ours.Skipped
			}
			if len(why) > 160 {
				why = why[:160] + "..."
			}
			fmt.Fprintf(b, "| %s | %s | %d | - | - | - | %s |\n", c.Workload, peerName(c.Peer, c.Workload), c.N, strings.ReplaceAll(why, "|", "/"))
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s (%.0f / %.0f) | %s (%.1f / %.1f) | %s (%.0f / %.0f) | %s / %s |\n",
			c.Workload, peerName(c.Peer, c.Workload), c.N, ratioText(c.RPSRatio), c.Ours.RPS, c.Theirs.RPS,
			ratioText(c.CPURatio), c.Ours.ServerCPUUsPerReq, c.Theirs.ServerCPUUsPerReq,
			ratioText(c.BytesRatio), c.Ours.BytesPerReq, c.Theirs.BytesPerReq, or(c.Ours.Verdict, "-"), or(c.Theirs.Verdict, "-"))
	}
}

func ratioText(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", r)
}

// writePublished compares the model with the article's 12-core heavy run.
func writePublished(b *bufio.Writer, models []Model) {
	P := Published
	fmt.Fprintf(b, "\n## Sanity check: the article's heavy PATCH on 12 cores\n\n")
	fmt.Fprintf(b, "Published: one Node process %.0f req/s (one core at 100%% => %.0f µs/req), 12 workers %.0f req/s (low load) and %.0f-%.0f req/s (max load, generator ~%.0f cores on the same host), ~%s.\n",
		P.OneCoreRPS, 1e6/P.OneCoreRPS, P.LowRPS, P.MaxRPSLo, P.MaxRPSHi, P.GenCores, rate(P.BytesPerS))
	lo, hi := ImpliedAlpha(P.OneCoreRPS, P.MaxRPSHi, P.Cores), ImpliedAlpha(P.OneCoreRPS, P.MaxRPSLo, P.Cores)
	fmt.Fprintf(b, "- Implied loss per core: alpha %.3f-%.3f (12 x %.0f = %.0f if linear; efficiency %.0f-%.0f%%).\n",
		lo, hi, P.OneCoreRPS, 12*P.OneCoreRPS, 100*P.MaxRPSLo/(12*P.OneCoreRPS), 100*P.MaxRPSHi/(12*P.OneCoreRPS))
	// Ten server cores is the fairer count: the generator used ~2 of the 12.
	pm := PublishedModel(0)
	fmt.Fprintf(b, "- With no loss per core: 12 cores => %.0f req/s; 10 cores (2 left to the generator) => %.0f req/s.\n",
		pm.CPULimit(12), pm.CPULimit(10))
	if m, ok := modelFor(models, "heavy", ModeCluster); ok && m.NoPrediction == "" {
		pa := PublishedModel(m.Alpha)
		fmt.Fprintf(b, "- With our heavy route's measured alpha %.3f: 12 cores => %.0f req/s, 10 cores => %.0f req/s (published 42,000-50,000).\n",
			m.Alpha, pa.CPULimit(12), pa.CPULimit(10))
		ours := m.Predict(P.Cores, Link{})
		fmt.Fprintf(b, "- Our heavy route on 12 cores, no link limit: %.0f req/s at %.1f µs/req and %.0f B/req (%.1fx the article's CPU per request), %s.\n",
			ours.RPS, m.CPUUsPerReq, m.BytesPerReq, m.CPUUsPerReq/(1e6/P.OneCoreRPS), rate(ours.BytesPerS))
	}
	for _, l := range []float64{1e9, 10e9, 25e9} {
		k := pm.LinkLimit(Link{BitsPerS: l})
		fmt.Fprintf(b, "- A %s NIC carries %.0f responses/s of 32 KiB (%.0f B on the wire each): %s.\n", linkName(l), k,
			P.BytesPerReq*WireFactor, map[bool]string{true: "below the published 42,000-50,000, so a real NIC of this speed would have been the ceiling", false: "above the published rate"}[k < P.MaxRPSLo])
	}
	fmt.Fprintf(b, "- Published 1.6 GB/s = %.1f Gbit/s of payload (%.1f Gbit/s on Ethernet): it only fit because loopback is not a NIC.\n",
		P.BytesPerS*8/1e9, P.BytesPerS*8*WireFactor/1e9)
}

func linkName(bits float64) string {
	if bits >= 1e9 && math.Mod(bits, 1e9) == 0 {
		return fmt.Sprintf("%.0f GbE", bits/1e9)
	}
	return FormatBits(bits)
}

// rate prints bytes per second as MB/s or GB/s.
func rate(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.2f GB/s", bps/1e9)
	}
	return fmt.Sprintf("%.1f MB/s", bps/1e6)
}

// ModelSummary is one line per cluster model: where each link becomes the ceiling
// ("unknown" when the model has no bytes per request).
func ModelSummary(models []Model, links []float64, maxCores int) []string {
	var out []string
	for _, m := range models {
		if m.Mode != ModeCluster {
			continue
		}
		if m.NoPrediction != "" {
			out = append(out, fmt.Sprintf("workload=%s no_prediction=%q remeasure=%q", m.Name(), m.NoPrediction, RemeasureHint))
			continue
		}
		var parts []string
		for _, l := range links {
			n := m.Crossover(Link{BitsPerS: l}, maxCores)
			s := "never"
			switch {
			case !m.LinkKnown():
				s = "unknown"
			case n > 0:
				s = fmt.Sprint(n)
			}
			parts = append(parts, linkName(l)+"="+s)
		}
		line := fmt.Sprintf("workload=%s nic_ceiling_at_cores: %s", m.Name(), strings.Join(parts, " "))
		if len(m.Terms) > 0 {
			line += fmt.Sprintf(" fit_from=%q", m.TermsText())
		}
		out = append(out, line)
	}
	return out
}
