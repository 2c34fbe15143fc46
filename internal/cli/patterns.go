package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
)

// The command-line patterns BranchFS's users know (BranchContext's CLI):
// run, speculate and best-of-n, over the tree's verbs. Each attempt is a
// forked node; its command runs in the node's copy of the current
// directory (on the dir backend a host process in its own process group,
// which a loss kills whole; on a sandbox backend through exec), with
// ARBOR_TREE, ARBOR_NODE and ARBOR_ATTEMPT set. The first commit wins;
// the losers are killed and aborted.

// patternFlags are the flags every pattern takes.
type patternFlags struct {
	tree, from string
	timeout    time.Duration
}

func (p *patternFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&p.tree, "tree", "", "the tree (default $ARBOR_TREE, else the tree whose base holds the current directory; one is made over it when none does)")
	cmd.Flags().StringVar(&p.from, "from", "", "the node to fork (default the tree's root)")
	cmd.Flags().DurationVar(&p.timeout, "timeout", 0, "kill an attempt after this long (0: no limit)")
}

// attempt is one forked node and what ran in it.
type attempt struct {
	n      int
	node   string
	dir    string // the command's directory: the node's copy of the current directory
	rel    string // that directory relative to the node's files
	code   int    // exit status; -1 if killed or not run
	out    bytes.Buffer
	scored float64
	err    error
}

// patternTree finds the tree the patterns work in and the current
// directory relative to its base.
func (e *env) patternTree(cl *client.Client, name string) (api.Tree, string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return api.Tree{}, "", err
	}
	if name == "" {
		name = e.getenv("ARBOR_TREE")
	}
	trees, err := cl.Do(e.ctx, api.Request{Op: api.OpTreeList})
	if err != nil {
		return api.Tree{}, "", err
	}
	var best *api.Tree
	for i, t := range trees.Trees {
		if name != "" && t.ID == name {
			best = &trees.Trees[i]
			break
		}
		if name == "" && (cwd == t.Base || strings.HasPrefix(cwd, strings.TrimSuffix(t.Base, "/")+"/")) && (best == nil || len(t.Base) > len(best.Base)) {
			best = &trees.Trees[i]
		}
	}
	if best == nil {
		if name != "" {
			return api.Tree{}, "", api.Errorf(api.ErrNotFound, "tree %q", name)
		}
		r, err := cl.Do(e.ctx, api.Request{Op: api.OpTreeCreate, Base: cwd})
		if err != nil {
			return api.Tree{}, "", err
		}
		fmt.Fprintf(e.stderr, "made tree %s over %s\n", r.TreeID, cwd)
		return api.Tree{ID: r.TreeID, Base: cwd, Root: r.Root, Backend: "dir"}, "", nil
	}
	rel, err := filepath.Rel(best.Base, cwd)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		rel = ""
	}
	return *best, rel, nil
}

// forkAttempts makes n attempts of tree t from node from (the root if empty), in
// one fork_batch.
func (e *env) forkAttempts(cl *client.Client, t api.Tree, from, rel, label string, n int) ([]*attempt, error) {
	if from == "" {
		from = t.Root
	}
	labels := make([]string, n)
	for i := range labels {
		labels[i] = fmt.Sprintf("%s-%d", label, i)
	}
	forks, _, err := cl.ForkBatch(e.ctx, t.ID, from, labels)
	if err != nil {
		return nil, err
	}
	out := make([]*attempt, len(forks))
	for i, f := range forks {
		out[i] = &attempt{n: i, node: f.NodeID, dir: filepath.Join(f.Path, rel), rel: rel, code: -1}
	}
	return out, nil
}

// runIn runs argv in attempt a: a host process in the node's files on the
// dir backend (its own process group, killed whole when ctx ends), exec
// elsewhere. Its output goes to a.out and, if tee, to w as it comes.
func (e *env) runIn(ctx context.Context, cl *client.Client, t api.Tree, a *attempt, argv []string, timeout time.Duration, w io.Writer) {
	env := []string{"ARBOR_TREE=" + t.ID, "ARBOR_NODE=" + a.node, "ARBOR_ATTEMPT=" + strconv.Itoa(a.n)}
	var sink io.Writer = &a.out
	if w != nil {
		sink = io.MultiWriter(&a.out, w)
	}
	if t.Backend != "" && t.Backend != "dir" {
		x, err := cl.Exec(ctx, api.Request{TreeID: t.ID, NodeID: a.node, Argv: argv, Env: env, Cwd: a.rel, TimeoutNS: int64(timeout)},
			func(o api.ExecOutput) error { _, err := sink.Write(o.Data); return err })
		a.err, a.code = err, x.ExitCode
		return
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = a.dir, append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = sink, sink
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		a.err = err
		return
	}
	stop := context.AfterFunc(ctx, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err := cmd.Wait()
	stop()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left behind in its group
	var ee *exec.ExitError
	switch {
	case err == nil:
		a.code = 0
	case ctx.Err() != nil:
		a.err = fmt.Errorf("killed: %w", context.Cause(ctx))
	case errors.As(err, &ee):
		a.code = ee.ExitCode()
	default:
		a.err = err
	}
}

// settle commits the winner (if any) and aborts every other attempt.
func (e *env) settle(cl *client.Client, t api.Tree, as []*attempt, winner *attempt) error {
	var errs []error
	if winner != nil {
		if _, err := cl.Commit(e.ctx, t.ID, winner.node); err != nil {
			errs = append(errs, fmt.Errorf("commit %s: %w", winner.node, err))
			winner = nil
		}
	}
	for _, a := range as {
		if a != winner {
			if err := cl.Abort(e.ctx, t.ID, a.node); err != nil && !errors.Is(err, api.ErrNotFound) {
				errs = append(errs, fmt.Errorf("abort %s: %w", a.node, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (e *env) runPatternCmd() *cobra.Command {
	var p patternFlags
	cmd := &cobra.Command{
		Use:   "run [--tree T] [--from NODE] [--timeout D] -- CMD [ARGS...]",
		Short: "Run a command in a fresh branch: commit on exit 0, abort otherwise",
		Long: `Forks a node of the tree, runs CMD in its copy of the current directory (with
ARBOR_TREE and ARBOR_NODE set), and commits the node into its parent if CMD
exits 0, aborts it otherwise. arbor's exit status is CMD's.`,
		Example: "  arbor run -- make test\n  arbor run --tree t1 --timeout 10m -- ./fix.sh",
		Args:    minArgs(1),
	}
	p.add(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.withClient(func(cl *client.Client) error {
			t, rel, err := e.patternTree(cl, p.tree)
			if err != nil {
				return err
			}
			as, err := e.forkAttempts(cl, t, p.from, rel, "run", 1)
			if err != nil {
				return err
			}
			a := as[0]
			e.runIn(e.ctx, cl, t, a, args, p.timeout, e.stdout)
			var winner *attempt
			if a.err == nil && a.code == 0 {
				winner = a
			}
			if err := e.settle(cl, t, as, winner); err != nil {
				return err
			}
			switch {
			case a.err != nil:
				fmt.Fprintf(e.stderr, "aborted %s: %v\n", a.node, a.err)
				return passExit(1)
			case winner == nil:
				fmt.Fprintf(e.stderr, "aborted %s: exit %d\n", a.node, a.code)
				return passExit(a.code)
			}
			fmt.Fprintf(e.stderr, "committed %s\n", a.node)
			return nil
		})
	}
	return withOps(cmd, api.OpTreeList, api.OpTreeForkBatch, api.OpTreeCommit, api.OpTreeAbort)
}

func (e *env) speculateCmd() *cobra.Command {
	var p patternFlags
	var cmds []string
	cmd := &cobra.Command{
		Use:   "speculate -c CMD -c CMD ... [--tree T] [--timeout D]",
		Short: "Run commands in parallel branches: the first to succeed commits",
		Long: `Forks one node per -c CMD (one fork_batch), runs every CMD at once (through
sh -c, in its node's copy of the current directory), commits the first to
exit 0 and kills and aborts the rest. Exit 0 if one succeeded, 1 if none.`,
		Example: `  arbor speculate -c "./fix-a.sh && make test" -c "./fix-b.sh && make test"`,
		Args:    exactArgs(0, 0),
	}
	p.add(cmd)
	cmd.Flags().StringArrayVarP(&cmds, "command", "c", nil, "a command to try (repeat: at least two)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(cmds) < 1 {
			return usagef("speculate: give at least one -c CMD")
		}
		return e.withClient(func(cl *client.Client) error {
			t, rel, err := e.patternTree(cl, p.tree)
			if err != nil {
				return err
			}
			as, err := e.forkAttempts(cl, t, p.from, rel, "speculate", len(cmds))
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancelCause(e.ctx)
			defer cancel(nil)
			var mu sync.Mutex
			var winner *attempt
			var wg sync.WaitGroup
			for i, a := range as {
				wg.Go(func() {
					e.runIn(ctx, cl, t, a, []string{"/bin/sh", "-c", cmds[i]}, p.timeout, nil)
					mu.Lock()
					defer mu.Unlock()
					if a.err == nil && a.code == 0 && winner == nil {
						winner = a
						cancel(fmt.Errorf("attempt %d (%s) succeeded first", a.n, a.node))
					}
				})
			}
			wg.Wait()
			if err := e.settle(cl, t, as, winner); err != nil {
				return err
			}
			for _, a := range as {
				state := fmt.Sprintf("exit %d", a.code)
				if a.err != nil {
					state = a.err.Error()
				}
				mark := " "
				if a == winner {
					mark = "*"
				}
				fmt.Fprintf(e.stdout, "%s %s %-24s %s\n", mark, a.node, state, cmds[a.n])
			}
			if winner == nil {
				fmt.Fprintln(e.stderr, "no attempt succeeded; all aborted")
				return passExit(1)
			}
			e.stdout.Write(winner.out.Bytes())
			return nil
		})
	}
	return withOps(cmd, api.OpTreeList, api.OpTreeForkBatch, api.OpTreeCommit, api.OpTreeAbort)
}

func (e *env) bestOfNCmd() *cobra.Command {
	var p patternFlags
	var n int
	var score string
	cmd := &cobra.Command{
		Use:   "best-of-n -n N [--score CMD] [--tree T] -- CMD [ARGS...]",
		Short: "Run a command in N branches and commit the best-scoring one",
		Long: `Forks N nodes (one fork_batch), runs CMD in each at once (ARBOR_ATTEMPT is
0..N-1), then the score command in each attempt that exited 0 (sh -c, in
its files; its stdout is a number, higher is better; without --score an
attempt scores 0 and the first to succeed wins). The best commits; the
rest are aborted.`,
		Example: `  arbor best-of-n -n 4 --score "./bench.sh" -- ./tune.sh`,
		Args:    minArgs(1),
	}
	p.add(cmd)
	cmd.Flags().IntVarP(&n, "n", "n", 3, "attempts")
	cmd.Flags().StringVar(&score, "score", "", "score command (stdout: a number; higher wins)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if n < 1 || n > 1024 {
			return usagef("best-of-n: -n must be 1 to 1024")
		}
		return e.withClient(func(cl *client.Client) error {
			t, rel, err := e.patternTree(cl, p.tree)
			if err != nil {
				return err
			}
			as, err := e.forkAttempts(cl, t, p.from, rel, "best", n)
			if err != nil {
				return err
			}
			var wg sync.WaitGroup
			for _, a := range as {
				wg.Go(func() {
					e.runIn(e.ctx, cl, t, a, args, p.timeout, nil)
					if a.err != nil || a.code != 0 || score == "" {
						return
					}
					s := &attempt{n: a.n, node: a.node, dir: a.dir, rel: a.rel}
					e.runIn(e.ctx, cl, t, s, []string{"/bin/sh", "-c", score}, p.timeout, nil)
					v, perr := strconv.ParseFloat(strings.TrimSpace(s.out.String()), 64)
					switch {
					case s.err != nil || s.code != 0:
						a.err = fmt.Errorf("score: exit %d %v", s.code, s.err)
					case perr != nil:
						a.err = fmt.Errorf("score: %q is not a number", strings.TrimSpace(s.out.String()))
					default:
						a.scored = v
					}
				})
			}
			wg.Wait()
			var winner *attempt
			for _, a := range as {
				if a.err == nil && a.code == 0 && (winner == nil || a.scored > winner.scored) {
					winner = a
				}
			}
			if err := e.settle(cl, t, as, winner); err != nil {
				return err
			}
			for _, a := range as {
				state := fmt.Sprintf("exit %d score %g", a.code, a.scored)
				if a.err != nil {
					state = a.err.Error()
				}
				mark := " "
				if a == winner {
					mark = "*"
				}
				fmt.Fprintf(e.stdout, "%s %s %s\n", mark, a.node, state)
			}
			if winner == nil {
				fmt.Fprintln(e.stderr, "no attempt succeeded; all aborted")
				return passExit(1)
			}
			return nil
		})
	}
	return withOps(cmd, api.OpTreeList, api.OpTreeForkBatch, api.OpTreeCommit, api.OpTreeAbort)
}

// minArgs checks that at least n positional arguments were given.
func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("usage: %s", cmd.UseLine())
		}
		return nil
	}
}
