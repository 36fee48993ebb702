package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/onehost/onehost/internal/ceiling"
)

func runModel(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ceiling model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	results := fs.String("results", "data/ceiling", "result files or directories (searched for ceiling.json and .csv), comma-separated")
	csvs := fs.String("csv", "", "bench/scale.sh CSV files, comma-separated (then -results is read only when given)")
	fitMaxN := fs.Int("fit-max-n", ceiling.DefaultFitMaxN, "the extrapolation check fits on runs with N up to this and predicts the rest")
	cores := fs.Int("cores", 12, "server cores to predict for")
	nic := fs.String("nic", "10g", "link to predict behind: 1g, 10g, 25g, 100g, 100mbit")
	maxCores := fs.Int("max-cores", 64, "largest core count of the tables and the crossover search")
	plots := fs.String("plots", "", "write SVG plots here (default: DIR/plots when -results is one directory; \"-\" none)")
	report := fs.String("report", "", "also write the report here (default: DIR/model.md when -results is one directory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("model: unexpected argument %q", fs.Arg(0))
	}
	link, err := ceiling.ParseBits(*nic)
	if err != nil {
		return err
	}
	if *cores < 1 || *maxCores < 1 || *fitMaxN < 1 {
		return fmt.Errorf("model: -cores %d, -max-cores %d and -fit-max-n %d: want at least 1", *cores, *maxCores, *fitMaxN)
	}
	resultsSet := false
	fs.Visit(func(f *flag.Flag) { resultsSet = resultsSet || f.Name == "results" })
	var paths []string
	if *csvs == "" || resultsSet {
		paths = splitList(*results)
	}
	csvPaths := splitList(*csvs)
	for _, p := range csvPaths {
		if !strings.EqualFold(filepath.Ext(p), ".csv") {
			return fmt.Errorf("model: -csv %q: want a .csv file", p)
		}
	}
	runs, machines, err := ceiling.LoadRuns(append(paths, csvPaths...)...)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("model: no runs in %s", strings.Join(append(paths, csvPaths...), ","))
	}
	// Repeats of a cell (sweep -repeat, -host-busy-repeats, or two sweeps read together)
	// count once, by their median run, in the fit, the checks and the plots.
	runs = ceiling.MedianRuns(runs)
	oneDir := ""
	if len(paths) == 1 && len(csvPaths) == 0 {
		if st, err := os.Stat(paths[0]); err == nil && st.IsDir() {
			oneDir = paths[0]
		}
	}
	if *plots == "" && oneDir != "" {
		*plots = filepath.Join(oneDir, "plots")
	}
	if *report == "" && oneDir != "" {
		*report = filepath.Join(oneDir, "model.md")
	}

	var buf bytes.Buffer
	cfg := ceiling.ReportConfig{Cores: *cores, LinkBits: link, MaxCores: *maxCores, FitMaxN: *fitMaxN}
	if err := ceiling.WriteReport(&buf, runs, machines, cfg); err != nil {
		return err
	}
	if _, err := stdout.Write(buf.Bytes()); err != nil {
		return err
	}
	models := ceiling.Fit(runs)
	for _, l := range ceiling.ModelSummary(models, []float64{1e9, 10e9, 25e9, 100e9}, *maxCores) {
		fmt.Fprintln(stdout, l)
	}
	for _, l := range ceiling.ValidationSummary(ceiling.Validate(runs, *fitMaxN)) {
		fmt.Fprintln(stdout, l)
	}
	if *report != "" {
		if err := os.WriteFile(*report, buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		b, _ := json.MarshalIndent(models, "", "  ")
		if err := os.WriteFile(filepath.Join(filepath.Dir(*report), "model.json"), append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write model: %w", err)
		}
	}
	if *plots != "" && *plots != "-" {
		// The plots draw the sweep's own runs (ceiling.WritePlots leaves out CSV sources).
		names, err := ceiling.WritePlots(*plots, runs, models, ceiling.Provenance(runs, machines))
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "ceiling model: %d plots in %s\n", len(names), *plots)
	}
	return nil
}
