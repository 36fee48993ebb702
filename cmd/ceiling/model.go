package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/onehost/onehost/internal/ceiling"
)

func runModel(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ceiling model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	results := fs.String("results", "data/ceiling", "result files or directories (searched for ceiling.json), comma-separated")
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
	if *cores < 1 || *maxCores < 1 {
		return fmt.Errorf("model: -cores %d and -max-cores %d: want at least 1", *cores, *maxCores)
	}
	paths := splitList(*results)
	runs, machines, err := ceiling.LoadRuns(paths...)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("model: no runs in %s", *results)
	}
	oneDir := ""
	if len(paths) == 1 {
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
	cfg := ceiling.ReportConfig{Cores: *cores, LinkBits: link, MaxCores: *maxCores}
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
		names, err := ceiling.WritePlots(*plots, runs, models)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "ceiling model: %d plots in %s\n", len(names), *plots)
	}
	return nil
}
