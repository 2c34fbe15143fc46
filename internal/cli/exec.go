package cli

import (
	"fmt"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// execCmd is arbor exec TREE NODE -- CMD ARGS...: the command runs in the
// node's sandbox, its output streamed as it comes, and its exit status
// is arbor's (128+N for a signal N, as a shell reports it).
func (e *env) execCmd() *cobra.Command {
	var cwd string
	var envs []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "exec TREE NODE [--cwd DIR] [--env K=V]... [--timeout D] -- CMD [ARGS...]",
		Short: "Run a command in a live node's sandbox",
		Long: `Runs CMD in the sandbox of live node NODE of tree TREE: its stdout and
stderr are streamed as they come, and its exit status becomes arbor's (128+N
when signal N ended it, "signal: KILL" on stderr). --cwd is relative to the
node's files. A tree of backend dir runs no processes: exec is refused with
not_supported (it needs backend jail or vm).`,
		Example: "  arbor exec t1 n2 -- make test\n  arbor exec t1 n2 --cwd src --env GOFLAGS=-mod=vendor --timeout 5m -- go test ./...",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 3 {
				return usagef("usage: %s", cmd.UseLine())
			}
			return nil
		},
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory, relative to the node's files")
	cmd.Flags().StringArrayVar(&envs, "env", nil, "an environment variable K=V (repeatable)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "kill the command after this long (0: no limit)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		req := api.Request{TreeID: args[0], NodeID: args[1], Argv: args[2:], Env: envs, Cwd: cwd, TimeoutNS: int64(timeout)}
		return e.withClient(func(cl *client.Client) error {
			x, err := cl.Exec(e.ctx, req, func(o api.ExecOutput) error {
				w := e.stdout
				if o.Stream == "stderr" {
					w = e.stderr
				}
				_, err := w.Write(o.Data)
				return err
			})
			if err != nil {
				return err
			}
			if x.OOMKilled {
				fmt.Fprintln(e.stderr, "out of memory: the kernel killed a process of the node at its limit (budget max_node_ram_bytes)")
			}
			if x.Signal != "" {
				fmt.Fprintf(e.stderr, "signal: %s\n", x.Signal)
				if n := unix.SignalNum("SIG" + x.Signal); n != 0 {
					return passExit(128 + int(n))
				}
				return passExit(128)
			}
			if x.ExitCode != 0 {
				return passExit(x.ExitCode)
			}
			return nil
		})
	}
	return withOps(cmd, api.OpTreeExec)
}
