package sandboxbench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Main is `arbor bench sandbox`: it parses args, runs the cases and writes
// the table (or with --json the report) to stdout; progress goes to stderr
// with -v. It returns the exit code: 0 on success, 1 when the run fails, 2
// on bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("bench sandbox", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var (
		cfg     Config
		asJSON  = fset.Bool("json", false, "write the report as JSON instead of a table")
		verbose = fset.Bool("v", false, "log progress to stderr")
		caseArg = fset.String("case", "", "cases to run, comma-separated (default all: "+strings.Join(CaseNames(), ",")+")")
		sysArg  = fset.String("system", "", "systems to run, comma-separated (default all: "+strings.Join(Systems, ",")+")")
	)
	fset.IntVar(&cfg.Rounds, "rounds", 20, "rounds per timed case (the report gives medians)")
	fset.StringVar(&cfg.Scratch, "scratch", "", "directory to work in (default the temp dir)")
	fset.Usage = func() {
		fmt.Fprintf(stderr, "usage: arbor bench sandbox [flags]\n\nRuns the process sandbox's benchmark: Arbor's jail, bubblewrap and unshare side by side.\n\n")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "bench sandbox: unexpected arguments: %s\n", strings.Join(fset.Args(), " "))
		return 2
	}
	cfg.Cases, cfg.Systems = splitList(*caseArg), splitList(*sysArg)
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bench sandbox: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return 1
		}
		return 0
	}
	rep.Table(stdout)
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// targets are the targets, by case and metric.
var targets = map[[2]string]string{
	{"start", "first byte of echo"}: "≤ 20 ms, ≤ bwrap",
	{"exec", "round trip of true"}:  "≤ 5 ms",
	{"kill-100", "kill until gone"}: "≤ 10 ms",
	{"fork-0", "source's pause"}:    "≤ 2 ms",
	{"fork-50M", "source's pause"}:  "≤ 2 ms, flat in size",
}

// Table writes the figures: one row per case and metric, one column per
// system, then the target; then what was skipped and why.
func (r Report) Table(w io.Writer) {
	fmt.Fprintf(w, "sandboxbench: %d rounds (medians); kernel %s, %d CPUs; load %s before, %s after\n\n", r.Rounds, r.Kernel, r.CPUs, r.LoadBefore, r.LoadAfter)
	var systems []string
	for _, s := range Systems {
		for _, res := range r.Results {
			if res.System == s {
				systems = append(systems, s)
				break
			}
		}
	}
	type row struct{ c, metric, unit string }
	var rows []row
	seen := map[row]bool{}
	for _, res := range r.Results {
		k := row{res.Case, res.Metric, res.Unit}
		if !seen[k] {
			seen[k] = true
			rows = append(rows, k)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "case\tmetric\tunit\t%s\ttarget\n", strings.Join(systems, "\t"))
	for _, k := range rows {
		cells := []string{k.c, k.metric, k.unit}
		for _, s := range systems {
			cell := "-"
			for _, res := range r.Results {
				if res.Case == k.c && res.Metric == k.metric && res.System == s {
					cell = format(res.Value)
				}
			}
			cells = append(cells, cell)
		}
		cells = append(cells, targets[[2]string{k.c, k.metric}])
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
	if len(r.Skipped) > 0 {
		fmt.Fprintln(w, "\nskipped:")
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "  %s on %s: %s\n", s.Case, s.System, s.Reason)
		}
	}
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
