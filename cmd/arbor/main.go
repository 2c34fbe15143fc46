// Command arbor is Arbor's CLI (and, as `arbor daemon`, its daemon).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/arbor-dev/arbor/internal/cli"
	"github.com/arbor-dev/arbor/internal/fsbench"
	"github.com/arbor-dev/arbor/internal/jail"
)

func main() {
	jail.Main() // first: a sandbox's init is a re-exec of this binary
	if os.Getenv(fsbench.ServeEnv) != "" {
		// `arbor bench fs` re-executes itself to serve each Arbor mount it
		// measures from a process of its own.
		os.Exit(fsbench.Serve(os.Stdin, os.Stdout))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
