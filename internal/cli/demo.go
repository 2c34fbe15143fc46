package cli

import (
	"flag"
	"os"

	"github.com/arbor-dev/arbor/internal/demo"
)

func (e *env) demo(args []string) error {
	if len(args) == 0 || args[0] != "coding-agent" {
		return usagef("usage: arbor demo coding-agent [--workdir DIR] [--keep]")
	}
	fs := flag.NewFlagSet("demo coding-agent", flag.ContinueOnError)
	wd, _ := os.Getwd()
	workdir := fs.String("workdir", wd, "where the base directory and results/<ts>/ go")
	keep := fs.Bool("keep", false, "keep the tree after the demo (inspect it with arbor tree nodes)")
	if _, err := parse(fs, args[1:]); err != nil {
		return err
	}
	dir, err := absPath(*workdir)
	if err != nil {
		return err
	}
	_, err = demo.CodingAgent(e.ctx, demo.Config{Client: e.cl, Workdir: dir, Out: e.stdout, KeepTree: *keep})
	return err
}
