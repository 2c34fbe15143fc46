package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// execCmd is arbor exec TREE NODE -- CMD ARGS...: the command runs in the
// node's sandbox, its output streamed as it comes, its input forwarded,
// and its exit status is arbor's (128+N for a signal N, as a shell
// reports it).
func (e *env) execCmd() *cobra.Command {
	var o execOpts
	cmd := &cobra.Command{
		Use:   "exec TREE NODE [--cwd DIR] [--env K=V]... [--timeout D] [-i] [-t] [--detach] -- CMD [ARGS...]",
		Short: "Run a command in a live node's sandbox",
		Long: `Runs CMD in the sandbox of live node NODE of tree TREE: its stdout and
stderr are streamed as they come, and its exit status becomes arbor's (128+N
when signal N ended it, "signal: KILL" on stderr). --cwd is relative to the
node's files. A tree of backend dir runs no processes: exec is refused with
not_supported (it needs backend jail or vm).

Standard input is forwarded when it is not a terminal (a pipe, a file), or
with -i always; -n forwards none (as ssh -n: in a loop reading a file,
exec would otherwise take the rest of it). -t runs the command on a terminal of the sandbox (a pty, as
large as arbor's own, resized with it; arbor's terminal is put in raw mode
while it runs): -it for an interactive program. --detach starts the command
in the background and prints its process id: it runs while the node is live
(arbor ps, arbor logs, arbor kill).`,
		Example: "  arbor exec t1 n2 -- make test\n  arbor exec t1 n2 --cwd src --env GOFLAGS=-mod=vendor --timeout 5m -- go test ./...\n" +
			"  echo data | arbor exec t1 n2 -- wc -c\n  arbor exec -it t1 n2 -- python3\n  arbor exec --detach t1 n2 -- python3 -m http.server",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 3 {
				return usagef("usage: %s", cmd.UseLine())
			}
			return nil
		},
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().StringVar(&o.cwd, "cwd", "", "working directory, relative to the node's files")
	cmd.Flags().StringArrayVar(&o.env, "env", nil, "an environment variable K=V (repeatable)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "kill the command after this long (0: no limit)")
	cmd.Flags().BoolVarP(&o.stdin, "interactive", "i", false, "forward standard input even from a terminal")
	cmd.Flags().BoolVarP(&o.tty, "tty", "t", false, "run the command on a terminal (a pty)")
	cmd.Flags().BoolVar(&o.detach, "detach", false, "start the command in the background and print its process id")
	cmd.Flags().BoolVarP(&o.noStdin, "no-stdin", "n", false, "forward no standard input (the command reads an empty one)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.exec(args[0], args[1], args[2:], o)
	}
	return withOps(cmd, api.OpTreeExec)
}

type execOpts struct {
	cwd                string
	env                []string
	timeout            time.Duration
	stdin, tty, detach bool
	noStdin            bool
}

// shellCmd is arbor shell TREE NODE: exec -it of the sandbox's shell.
func (e *env) shellCmd() *cobra.Command {
	var o execOpts
	cmd := &cobra.Command{
		Use:   "shell TREE NODE [--cwd DIR] [--env K=V]...",
		Short: "An interactive shell in a live node's sandbox",
		Long: `Runs an interactive shell (bash if the sandbox has it, else sh) on a
terminal of node NODE's sandbox, as arbor exec -it does.`,
		Example:           "  arbor shell t1 n2",
		Args:              exactArgs(2, 2),
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().StringVar(&o.cwd, "cwd", "", "working directory, relative to the node's files")
	cmd.Flags().StringArrayVar(&o.env, "env", nil, "an environment variable K=V (repeatable)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.stdin, o.tty = true, true
		sh := []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i"}
		return e.exec(args[0], args[1], sh, o)
	}
	return withOps(cmd, api.OpTreeExec)
}

// terminal is f's descriptor if it is a terminal.
func terminal(v any) (int, bool) {
	f, ok := v.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return -1, false
	}
	return int(f.Fd()), true
}

func (e *env) exec(tree, node string, argv []string, o execOpts) error {
	req := api.Request{TreeID: tree, NodeID: node, Argv: argv, Env: o.env, Cwd: o.cwd, TimeoutNS: int64(o.timeout)}
	if o.detach {
		if o.tty || o.stdin {
			return usagef("arbor exec: --detach takes no -i or -t (a background process has no input)")
		}
		return e.withClient(func(cl *client.Client) error {
			id, err := cl.Spawn(e.ctx, req)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, id)
			return nil
		})
	}
	inFD, inTerm := terminal(e.stdin)
	var stdin io.Reader
	if o.noStdin && (o.stdin || o.tty) {
		return usagef("arbor exec: -n forwards no input: not with -i or -t")
	}
	if (o.stdin || o.tty || !inTerm) && !o.noStdin {
		stdin = e.stdin
	}
	var resize chan api.Input
	if o.tty {
		req.TTY, req.Rows, req.Cols = true, 24, 80
		if outFD, ok := terminal(e.stdout); ok {
			if w, h, err := term.GetSize(outFD); err == nil {
				req.Rows, req.Cols = uint16(h), uint16(w)
			}
			resize = make(chan api.Input, 1)
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, unix.SIGWINCH)
			defer signal.Stop(winch)
			stop := make(chan struct{})
			defer close(stop)
			go func() { // ends with the exec (stop)
				for {
					select {
					case <-stop:
						return
					case <-winch:
						if w, h, err := term.GetSize(outFD); err == nil {
							select {
							case resize <- api.Input{Rows: uint16(h), Cols: uint16(w)}:
							default: // one pending is enough: the next takes the latest size
							}
						}
					}
				}
			}()
		}
		if inTerm {
			old, err := term.MakeRaw(inFD)
			if err != nil {
				return fmt.Errorf("raw mode for the terminal: %w", err)
			}
			defer term.Restore(inFD, old)
		}
	}
	return e.withClient(func(cl *client.Client) error {
		var x api.ExecExit
		var err error
		out := func(o api.ExecOutput) error {
			w := e.stdout
			if o.Stream == "stderr" {
				w = e.stderr
			}
			_, err := w.Write(o.Data)
			return err
		}
		x, err = cl.ExecInput(e.ctx, req, stdin, resize, out)
		if err != nil {
			return err
		}
		return exitStatus(e, x)
	})
}

// exitStatus makes how a command ended arbor's exit status.
func exitStatus(e *env, x api.ExecExit) error {
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
}

// psCmd is arbor ps TREE NODE: the node's background processes.
func (e *env) psCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ps TREE NODE",
		Short: "List a node's background processes (arbor exec --detach)",
		Long: `Lists the background processes of node NODE: those running, and the last
few that ended, with how they ended.`,
		Example:           "  arbor ps t1 n2\n  arbor ps t1 n2 -o json",
		Args:              exactArgs(2, 2),
		ValidArgsFunction: e.completeTree(true),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.withClient(func(cl *client.Client) error {
			ps, err := cl.Processes(e.ctx, args[0], args[1])
			if err != nil {
				return err
			}
			if out.json {
				return json.NewEncoder(e.stdout).Encode(ps)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPID\tSTATUS\tSTARTED\tCOMMAND")
			for _, p := range ps {
				st := "running"
				if p.Exit != nil {
					st = fmt.Sprintf("exit %d", p.Exit.ExitCode)
					if p.Exit.Signal != "" {
						st = "signal: " + p.Exit.Signal
					}
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", p.ID, p.Pid, st, time.Unix(0, p.StartedNS).Format(time.TimeOnly), strings.Join(p.Argv, " "))
			}
			return tw.Flush()
		})
	}
	return withOps(cmd, api.OpExecList)
}

// killCmd is arbor kill TREE NODE PROCESS.
func (e *env) killCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "kill TREE NODE PROCESS",
		Short:             "Kill a background process and every process it started",
		Example:           "  arbor kill t1 n2 p3",
		Args:              exactArgs(3, 3),
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.withClient(func(cl *client.Client) error {
			return cl.Kill(e.ctx, args[0], args[1], args[2])
		})
	}
	return withOps(cmd, api.OpExecKill)
}

// logsCmd is arbor logs TREE NODE PROCESS [-f].
func (e *env) logsCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs TREE NODE PROCESS [-f]",
		Short: "Print what a background process wrote",
		Long: `Prints what background process PROCESS of node NODE wrote (its last 1 MiB),
stdout to stdout and stderr to stderr; with -f, goes on until it ends and then
exits with its status, as arbor exec does.`,
		Example:           "  arbor logs t1 n2 p3\n  arbor logs -f t1 n2 p3",
		Args:              exactArgs(3, 3),
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on until the process ends")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.withClient(func(cl *client.Client) error {
			x, err := cl.Logs(e.ctx, args[0], args[1], args[2], follow, func(o api.ExecOutput) error {
				w := e.stdout
				if o.Stream == "stderr" {
					w = e.stderr
				}
				_, err := w.Write(o.Data)
				return err
			})
			if err != nil || !follow || x == nil {
				return err
			}
			return exitStatus(e, *x)
		})
	}
	return withOps(cmd, api.OpExecLogs)
}
