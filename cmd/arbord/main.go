// Command arbord is Arbor's daemon: the same as `arbor daemon`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/arbor-dev/arbor/internal/cli"
	"github.com/arbor-dev/arbor/internal/jail"
)

func main() {
	jail.Main() // first: a sandbox's init is a re-exec of this binary
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, append([]string{"daemon"}, os.Args[1:]...), os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
