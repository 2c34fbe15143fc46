package fsbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arbor-dev/arbor/internal/fusemount"
	"golang.org/x/sys/unix"
)

// Report is the outcome of a Run.
type Report struct {
	Machine Machine  `json:"machine"`
	Size    int64    `json:"size_bytes"`
	Files   int      `json:"files"`
	Rounds  int      `json:"rounds"`
	Systems []string `json:"systems"`
	Cases   []string `json:"cases"`
	Results []Result `json:"results"`
	// Skipped lists what did not run and why.
	Skipped []Skip `json:"skipped,omitempty"`
}

// Result is one case on one system.
type Result struct {
	System string `json:"system"`
	Case   string `json:"case"`
	// Unit of Value: "MiB/s", "kIOPS" (higher is better), "µs/op", "ms".
	Unit           string `json:"unit"`
	HigherIsBetter bool   `json:"higher_is_better"`
	// Samples are the timed parts of each round.
	Samples []time.Duration `json:"samples_ns"`
	Median  time.Duration   `json:"median_ns"`
	// Ops and Bytes are per round: what Value is computed from.
	Ops   int   `json:"ops"`
	Bytes int64 `json:"bytes,omitempty"`
	// Value is the median in Unit.
	Value float64 `json:"value"`
	// Ratio is Value divided by the baseline's Value for the same case
	// (0 when there is no baseline result).
	Ratio float64 `json:"ratio_to_native,omitempty"`
}

// Skip records a system or a case that did not run.
type Skip struct {
	System string `json:"system"`
	Case   string `json:"case,omitempty"` // empty: the whole system
	Reason string `json:"reason"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	MemTotal  int64  `json:"mem_total_bytes"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	// Disk is the filesystem under test: the mount holding the scratch
	// directory (source, type, options).
	Disk string `json:"disk"`
	Root bool   `json:"root"`
}

func (r *Result) finish() {
	r.Median = median(r.Samples)
	sec := r.Median.Seconds()
	switch r.Unit {
	case unitMiBps:
		if sec > 0 {
			r.Value = float64(r.Bytes) / (1 << 20) / sec
		}
	case unitKIOPS:
		if sec > 0 {
			r.Value = float64(r.Ops) / sec / 1000
		}
	case unitUsOp:
		r.Value = sec * 1e6 / float64(max(r.Ops, 1))
	case unitMs:
		r.Value = sec * 1e3 / float64(max(r.Ops, 1))
	}
}

func (r *Report) skip(system string, c *caseDef, reason string) {
	r.Skipped = append(r.Skipped, Skip{System: system, Case: c.name, Reason: reason})
}

func (r *Report) skipSystem(system string, err error) {
	r.Skipped = append(r.Skipped, Skip{System: system, Reason: err.Error()})
}

func (r *Report) computeRatios() {
	base := map[string]float64{}
	for _, res := range r.Results {
		if res.System == Baseline {
			base[res.Case] = res.Value
		}
	}
	for i := range r.Results {
		if b := base[r.Results[i].Case]; b > 0 {
			r.Results[i].Ratio = r.Results[i].Value / b
		}
	}
}

// Result returns the result of a case on a system, if there is one.
func (r Report) Result(system, caseName string) (Result, bool) {
	for _, res := range r.Results {
		if res.System == system && res.Case == caseName {
			return res, true
		}
	}
	return Result{}, false
}

// Table writes the medians as a text table: one row per case, one column
// per system, each cell the value and its ratio to native in the case's
// unit; then what was skipped.
func (r Report) Table(w io.Writer) {
	fmt.Fprintf(w, "fsbench: size %s, files %d, rounds %d (medians)\n", formatSize(r.Size), r.Files, r.Rounds)
	fmt.Fprintf(w, "machine: %d CPUs, %s RAM, kernel %s, %s, disk %s\n",
		r.Machine.CPUs, formatSize(r.Machine.MemTotal), r.Machine.Kernel, r.Machine.GoVersion, r.Machine.Disk)
	fmt.Fprintf(w, "ratio: value ÷ %s value (MiB/s, kIOPS: higher is better; µs/op, ms: lower is better)\n\n", Baseline)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "case\tunit")
	for _, s := range r.Systems {
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprintln(tw)
	for _, c := range r.Cases {
		unit := ""
		var cells []string
		any := false
		for _, s := range r.Systems {
			res, ok := r.Result(s, c)
			if !ok {
				cells = append(cells, "-")
				continue
			}
			any = true
			unit = res.Unit
			cell := formatValue(res.Value)
			if res.Ratio > 0 && s != Baseline {
				cell += fmt.Sprintf(" (%.2f)", res.Ratio)
			}
			cells = append(cells, cell)
		}
		if !any {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c, unit, strings.Join(cells, "\t"))
	}
	tw.Flush()
	if len(r.Skipped) > 0 {
		// One line per system and reason: "native: not a Brancher: commit-1K, ...".
		fmt.Fprintln(w, "\nskipped:")
		type key struct{ system, reason string }
		var order []key
		byKey := map[key][]string{}
		for _, s := range r.Skipped {
			k := key{s.System, strings.TrimPrefix(s.Reason, "commit: ")}
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			if s.Case != "" {
				byKey[k] = append(byKey[k], s.Case)
			} else if byKey[k] == nil {
				byKey[k] = []string{}
			}
		}
		for _, k := range order {
			if cs := byKey[k]; len(cs) > 0 {
				fmt.Fprintf(w, "  %s: %s: %s\n", k.system, k.reason, strings.Join(cs, ", "))
			} else {
				fmt.Fprintf(w, "  %s: %s\n", k.system, k.reason)
			}
		}
	}
}

// JSON writes the report as indented JSON.
func (r Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func formatValue(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func formatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// ParseSize reads a size such as 1G, 64M, 4K, 1GiB or 1048576.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "IB"), "B")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func probeMachine(dir string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Root: isRoot()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if kb, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), 10, 64)
				m.MemTotal = n << 10
			}
		}
		f.Close()
	}
	if mi, ok := fusemount.Of(dir); ok {
		m.Disk = fmt.Sprintf("%s %s on %s (%s)", mi.Source, mi.FSType, mi.Point, mi.Options)
	}
	return m
}
