// Package cli is the arbor command: workspace mounts (mount, create, diff,
// commit, abort, switch, list, unmount, mounts), the tree verbs (arbor tree
// ...), the demo, the benchmarks, and the daemon itself (arbor daemon). It
// speaks to arbord over its socket, starting it in the background when none
// answers and the command needs one.
//
// The commands are cobra commands built afresh for every Main call (no
// package globals): each has -h/--help with its flags and an example, the
// root has --version, `arbor completion bash|zsh|fish` writes a completion
// script, and a mistyped command gets "did you mean". Every error is printed
// as "arbor VERB: ..." with the full verb path; a usage error exits 2,
// every other failure 1.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/doctor"
	"github.com/spf13/cobra"
)

// env is one invocation's surroundings: no package globals.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	home   string // --home, or Home(getenv)
	// started is set when a command's RunE begins: an error before that
	// (a flag, an argument, a required flag, an unknown command) is a
	// usage error.
	started bool
}

// Main runs the arbor command and returns its exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	root := e.rootCmd()
	if args == nil {
		args = []string{} // cobra reads os.Args for a nil slice
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var pe passExit
	if errors.As(err, &pe) {
		return int(pe) // the command said why itself (arbor exec: the child's status)
	}
	if cmd == nil {
		cmd = root
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	var ue usageError
	if errors.As(err, &ue) || !e.started {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return 2
	}
	if errors.Is(err, api.ErrUnavailable) {
		fmt.Fprintf(stderr, "hint: this host lacks something Arbor needs; `arbor doctor` says what and how to fix it\n")
	}
	var ce exitError
	if errors.As(err, &ce) {
		return int(ce)
	}
	return 1
}

// rootCmd builds the whole command tree.
func (e *env) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "arbor",
		Short: "Branchable agent environments",
		Long: `arbor: branchable agent environments.

A workspace mount shows a base directory's branches at a mountpoint: fork a
branch, write in it, diff, commit into its parent (first commit wins) or abort.
Every branch is also reachable at MOUNTPOINT/@NAME/ without switching.

A tree is a snapshot tree of nodes with budgets (arbor tree ...): fork, commit,
abort, rollback, protect, prune, suspend, resume, evict.

The commands talk to the daemon arbord over $ARBOR_HOME/arbord.sock and start
it in the background when none answers (configure it in $ARBOR_HOME/arbord.toml;
see arbor daemon --help). arbor doctor says what this host can do for Arbor.

Environment: ARBOR_HOME (default /var/lib/arbor as root, ~/.local/share/arbor
otherwise).`,
		Example: `  arbor mount --base ~/src/app ~/ws
  arbor create try-a ~/ws
  arbor commit ~/ws
  arbor tree create --base ~/src/app --id t1
  arbor completion bash > /etc/bash_completion.d/arbor`,
		Version:           versionString(),
		SilenceErrors:     true,
		SilenceUsage:      true,
		Args:              subcommandArgs,
		RunE:              helpRunE,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	root.PersistentFlags().StringVar(&e.home, "home", Home(e.getenv), "Arbor's state directory ($ARBOR_HOME)")
	root.MarkPersistentFlagDirname("home")
	root.AddGroup(
		&cobra.Group{ID: "ws", Title: "Workspace mounts (a base directory's branches at a mountpoint):"},
		&cobra.Group{ID: "tree", Title: "Snapshot trees:"},
		&cobra.Group{ID: "other", Title: "Other commands:"},
	)
	for _, c := range e.workspaceCmds() {
		c.GroupID = "ws"
		root.AddCommand(c)
	}
	t := e.treeCmd()
	t.GroupID = "tree"
	root.AddCommand(t)
	for _, c := range []*cobra.Command{e.execCmd(), e.shellCmd(), e.psCmd(), e.logsCmd(), e.killCmd(),
		e.cpCmd(), e.lsCmd(), e.rmCmd(), e.mkdirCmd(), e.runPatternCmd(), e.speculateCmd(), e.bestOfNCmd(), e.imageCmd()} {
		c.GroupID = "tree"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{e.daemonCmd(), e.doctorCmd(), e.demoCmd(), e.benchCmd(), e.mcpCmd(), withOps(e.pingCmd(), api.OpPing), e.versionCmd()} {
		c.GroupID = "other"
		root.AddCommand(c)
	}
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
	e.markStart(root)
	return root
}

// markStart wraps every RunE of c and its subcommands so that it sets
// e.started first.
func (e *env) markStart(c *cobra.Command) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			e.started = true
			return run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		e.markStart(sub)
	}
}

// subcommandArgs is the Args of a command that has subcommands: a
// positional argument is an unknown subcommand, reported with cobra's
// suggestions ("did you mean").
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return usageError{msg}
}

// helpRunE makes a command with subcommands runnable, so that its Args
// (subcommandArgs) are checked; with no arguments it prints its help.
func helpRunE(cmd *cobra.Command, args []string) error { return cmd.Help() }

// exactArgs checks the count of positional arguments; the error shows the
// command's usage line.
func exactArgs(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > max {
			return usagef("usage: %s", cmd.UseLine())
		}
		return nil
	}
}

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// passExit is an exit status passed on with nothing more to say: arbor
// exec's, the command's own.
type passExit int

func (c passExit) Error() string { return fmt.Sprintf("exit %d", int(c)) }

// exitError is a failure whose exit code is given (arbor bench fs's).
type exitError int

func (c exitError) Error() string { return fmt.Sprintf("failed (exit %d)", int(c)) }

// Home is Arbor's state directory.
func Home(getenv func(string) string) string {
	if h := getenv("ARBOR_HOME"); h != "" {
		return h
	}
	if os.Geteuid() == 0 {
		return "/var/lib/arbor"
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "arbor")
	}
	return filepath.Join(os.TempDir(), "arbor")
}

func absPath(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%w: path %q: %w", api.ErrBadRequest, p, err)
	}
	return a, nil
}

// outputFlag is -o/--output: text (the default) or json.
type outputFlag struct{ json bool }

func (o *outputFlag) String() string {
	if o.json {
		return "json"
	}
	return "text"
}

func (o *outputFlag) Set(s string) error {
	switch s {
	case "json":
		o.json = true
	case "text", "":
		o.json = false
	default:
		return fmt.Errorf("output format %q: want json or text", s)
	}
	return nil
}

func (o *outputFlag) Type() string { return "format" }

func addOutput(cmd *cobra.Command) *outputFlag {
	o := &outputFlag{}
	cmd.Flags().VarP(o, "output", "o", "output format: text or json (the daemon's reply)")
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return o
}

func (e *env) doctorCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "What this host can do for Arbor, and how to fix what it cannot",
		Long: `Checks what this host can do for Arbor: one line per capability (ok, warn or
missing), what it means for Arbor, and how to fix it. Exits 1 when the default
backend (dir: files over FUSE) cannot run here. Starts no daemon.

With -o json: one JSON object with default_backend, default_backend_runs,
blocked_by, and checks (each with name, status, detail, fix).`,
		Example: "  arbor doctor\n  arbor doctor -o json",
		Args:    exactArgs(0, 0),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		r := doctor.Run(e.ctx, doctor.SystemHost(e.home))
		var err error
		if out.json {
			err = r.WriteJSON(e.stdout)
		} else {
			err = r.WriteText(e.stdout)
		}
		if err != nil {
			return err
		}
		if !r.Runs {
			return errors.New("the default backend cannot run on this host (see the missing lines above)")
		}
		return nil
	}
	return cmd
}

// withClient runs fn with a client of the daemon, starting one if none
// answers.
func (e *env) withClient(fn func(*client.Client) error) error {
	cl, err := e.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(cl)
}
