package fsbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/arbor-dev/arbor/internal/cowfs"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
)

// Main is `arbor bench fs`: it parses args, runs the baselines and the
// extra systems (Arbor's), and writes the table (or with --json the JSON
// report) to stdout. Progress goes to stderr with -v. It returns the exit
// code: 0 on success, 1 when the run fails, 2 on bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, extra []System) int {
	fset := flag.NewFlagSet("bench fs", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var (
		cfg      Config
		asJSON   = fset.Bool("json", false, "write the report as JSON instead of a table")
		jsonOut  = fset.String("json-out", "", "also write the JSON report to this file")
		size     = fset.String("size", "1G", "size of the big files (e.g. 64M, 1G)")
		verbose  = fset.Bool("v", false, "log progress to stderr")
		list     = fset.Bool("list", false, "list the cases and systems, and exit")
		cpuProf  = fset.String("cpuprofile", "", "write a CPU profile of the run to this file, and each Arbor mount server's to FILE.SYSTEM")
		fuseTr   = fset.String("fuse-transport", "", "the Arbor mounts' FUSE transport: dev (default), auto or uring")
		caseList listFlag
		sysList  listFlag
	)
	fset.IntVar(&cfg.Files, "files", defaultFiles, "file count of the metadata cases")
	fset.IntVar(&cfg.Rounds, "rounds", defaultRounds, "rounds per case (the report gives medians)")
	fset.IntVar(&cfg.GitFiles, "git-files", defaultGitFiles, "files in the git checkout")
	fset.StringVar(&cfg.Scratch, "scratch", "", "directory on the disk under test (default: the temp dir)")
	fset.StringVar(&cfg.GoModule, "gomod", "", "Go module that go-build compiles (default: the module of the working directory)")
	fset.Var(&caseList, "case", "cases to run, comma-separated or repeated (default: all)")
	fset.Var(&sysList, "system", "systems to run, comma-separated or repeated (default: all)")
	fset.Usage = func() {
		fmt.Fprintf(stderr, "usage: arbor bench fs [flags]\n\nRuns the filesystem benchmark against native, overlayfs, fuse-overlayfs and Arbor.\n\n")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "bench fs: unexpected arguments: %s\n", strings.Join(fset.Args(), " "))
		return 2
	}
	systems := append(Baselines(), extra...)
	if *list {
		fmt.Fprintf(stdout, "cases:\n  %s\nsystems:\n", strings.Join(CaseNames(), "\n  "))
		for _, s := range systems {
			fmt.Fprintf(stdout, "  %s\n", s.Name())
		}
		return 0
	}
	n, err := ParseSize(*size)
	if err != nil {
		fmt.Fprintf(stderr, "bench fs: --size: %v\n", err)
		return 2
	}
	cfg.Size = n
	cfg.Cases, cfg.Systems = caseList, sysList
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	}
	if err := cowfs.CheckTransport(*fuseTr); err != nil {
		fmt.Fprintf(stderr, "bench fs: --fuse-transport: %v\n", err)
		return 2
	}
	for _, s := range systems {
		if t, ok := s.(interface{ SetTransport(string) }); ok {
			t.SetTransport(*fuseTr)
		}
	}
	if *cpuProf != "" {
		for _, s := range systems {
			if p, ok := s.(interface{ SetCPUProfile(string) }); ok {
				p.SetCPUProfile(*cpuProf + "." + s.Name())
			}
		}
		stop, err := startCPUProfile(*cpuProf)
		if err != nil {
			fmt.Fprintf(stderr, "bench fs: --cpuprofile: %v\n", err)
			return 1
		}
		defer stop()
	}
	rep, err := Run(ctx, cfg, systems)
	if err != nil {
		fmt.Fprintf(stderr, "bench fs: %v\n", err)
		return 1
	}
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			fmt.Fprintf(stderr, "bench fs: %v\n", err)
			return 1
		}
	}
	if *asJSON {
		if err := rep.JSON(stdout); err != nil {
			fmt.Fprintf(stderr, "bench fs: %v\n", err)
			return 1
		}
		return 0
	}
	rep.Table(stdout)
	return 0
}

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func writeJSON(path string, rep Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = rep.JSON(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// listFlag is a flag that collects comma-separated values, repeatable.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
