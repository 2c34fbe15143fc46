// Package cli is the arbor command: workspace mounts (mount, create, diff,
// commit, abort, switch, list, unmount, mounts), the tree verbs (arbor tree
// ...), the demo, the benchmarks, and the daemon itself (arbor daemon). It
// speaks to arbord over its socket, starting it in the background when none
// answers.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/doctor"
)

// env is one invocation's surroundings: no package globals.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	cl     *client.Client
	home   string
}

// Main runs the arbor command and returns its exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if args[0] == "doctor" { // checks the host; starts no daemon
		return doctor.Main(ctx, args[1:], Home(e.getenv), stdout, stderr)
	}
	err := e.run(args[0], args[1:])
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "arbor %s: %v\n", args[0], err)
		return 2
	}
	fmt.Fprintf(stderr, "arbor %s: %v\n", args[0], err)
	return 1
}

const usage = `arbor: branchable agent environments.

Workspace mounts (a base directory's branches at a mountpoint):
  arbor mount --base DIR MOUNTPOINT      mount DIR's branches; the root shows main (= DIR)
  arbor create NAME MOUNTPOINT [-p PARENT] [--quota BYTES]
                                         fork PARENT (default: the current branch) into NAME;
                                         the mount shows NAME if it showed PARENT
  arbor diff MOUNTPOINT [BRANCH]         added/modified/deleted paths since the fork point
  arbor commit MOUNTPOINT [BRANCH]       the branch's changes land in its parent (first commit wins)
  arbor abort MOUNTPOINT [BRANCH]        drop the branch and its subtree
  arbor switch MOUNTPOINT BRANCH         show BRANCH at the mount root
  arbor list MOUNTPOINT                  the branches as a tree, with state
  arbor unmount MOUNTPOINT
  arbor mounts                           every mount of the daemon
Every branch is also reachable at MOUNTPOINT/@NAME/ without switching.

Trees (snapshot trees with budgets; nodes' files at their path):
  arbor tree create --base DIR [--max-live N] [--max-ram BYTES] [--max-disk BYTES] [--id ID]
  arbor tree fork TREE NODE [--label L | --labels a,b,c]
  arbor tree commit|abort|protect|unprotect|prune|suspend|resume TREE NODE
  arbor tree rollback TREE NODE [--label L]
  arbor tree evict TREE                  suspend least recently used nodes now
  arbor tree nodes TREE | list | watch [TREE] | drop TREE | open TREE
Add -o json for machine-readable output.

Other:
  arbor demo coding-agent [--workdir DIR]   the coding-agent-fork demo
  arbor bench fs [flags]                    filesystem benchmark (see arbor bench fs -h)
  arbor daemon [flags]                      run arbord in the foreground (see arbor daemon -h)
  arbor daemon stop                         ask the running daemon to exit (unmounting all) and wait
  arbor ping
  arbor doctor [-o json]                    what this host can do for Arbor, and how to fix what it cannot

Environment: ARBOR_HOME (default /var/lib/arbor as root, ~/.local/share/arbor otherwise);
the daemon's socket is $ARBOR_HOME/arbord.sock.
`

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

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

func (e *env) run(cmd string, args []string) error {
	e.home = Home(e.getenv)
	switch cmd {
	case "daemon":
		return e.daemon(args)
	case "bench":
		return e.bench(args)
	}
	switch cmd {
	case "mount", "create", "diff", "commit", "abort", "switch", "list", "unmount", "mounts", "tree", "demo", "ping":
	default:
		return usagef("unknown command %q (arbor help lists them)", cmd)
	}
	cl, err := e.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	e.cl = cl
	switch cmd {
	case "tree":
		return e.tree(args)
	case "demo":
		return e.demo(args)
	case "ping":
		v, err := cl.Ping(e.ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "pong", v)
		return nil
	}
	return e.workspace(cmd, args)
}

// parse parses flags anywhere among the arguments and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%v", err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func absPath(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return a, nil
}

func (e *env) do(req api.Request) (api.Response, error) { return e.cl.Do(e.ctx, req) }

func (e *env) workspace(cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	base := fs.String("base", "", "the base directory")
	parent := fs.String("p", "", "the parent branch")
	quota := fs.Int64("quota", 0, "the branch's storage limit in bytes")
	branch := fs.String("branch", "", "the branch to show")
	noDurable := fs.Bool("no-durable", false, "do not fsync a commit into the base")
	out := fs.String("o", "", "output format: json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	need := func(min, max int, form string) error {
		if len(pos) < min || len(pos) > max {
			return usagef("usage: arbor %s %s", cmd, form)
		}
		return nil
	}
	arg := func(i int) string {
		if i < len(pos) {
			return pos[i]
		}
		return ""
	}
	var req api.Request
	switch cmd {
	case "mount":
		if err := need(1, 1, "--base DIR MOUNTPOINT"); err != nil {
			return err
		}
		if *base == "" {
			return usagef("usage: arbor mount --base DIR MOUNTPOINT")
		}
		b, _ := absPath(*base)
		req = api.Request{Op: api.OpWsMount, Base: b, Branch: *branch}
		req.Mountpoint, _ = absPath(pos[0])
	case "create":
		if err := need(2, 2, "NAME MOUNTPOINT [-p PARENT]"); err != nil {
			return err
		}
		req = api.Request{Op: api.OpWsCreate, Branch: pos[0], Parent: *parent, QuotaBytes: *quota}
		req.Mountpoint, _ = absPath(pos[1])
	case "diff", "commit", "abort", "list", "unmount":
		if err := need(1, 2, "MOUNTPOINT [BRANCH]"); err != nil {
			return err
		}
		op := map[string]string{"diff": api.OpWsDiff, "commit": api.OpWsCommit, "abort": api.OpWsAbort,
			"list": api.OpWsList, "unmount": api.OpWsUnmount}[cmd]
		req = api.Request{Op: op, Branch: arg(1)}
		req.Mountpoint, _ = absPath(pos[0])
		if cmd == "commit" && *noDurable {
			f := false
			req.Durable = &f
		}
	case "switch":
		if err := need(2, 2, "MOUNTPOINT BRANCH"); err != nil {
			return err
		}
		req = api.Request{Op: api.OpWsSwitch, Branch: pos[1]}
		req.Mountpoint, _ = absPath(pos[0])
	case "mounts":
		req = api.Request{Op: api.OpWsMounts}
	}
	resp, err := e.do(req)
	if err != nil {
		return err
	}
	if *out == "json" {
		return json.NewEncoder(e.stdout).Encode(resp)
	}
	switch cmd {
	case "mount":
		fmt.Fprintf(e.stdout, "mounted %s at %s (showing %s)\n", req.Base, req.Mountpoint, resp.Branch)
	case "create":
		fmt.Fprintf(e.stdout, "created %s\n", req.Branch)
	case "commit":
		fmt.Fprintf(e.stdout, "committed into %s", resp.Branch)
		if len(resp.Stale) > 0 {
			fmt.Fprintf(e.stdout, "; stale now: %s", strings.Join(resp.Stale, ", "))
		}
		fmt.Fprintln(e.stdout)
	case "abort":
		fmt.Fprintf(e.stdout, "aborted; the mount shows %s\n", resp.Branch)
	case "switch":
		fmt.Fprintf(e.stdout, "showing %s\n", resp.Branch)
	case "diff":
		for _, c := range resp.Changes {
			mark := map[string]string{"added": "A", "modified": "M", "deleted": "D"}[c.Kind]
			fmt.Fprintf(e.stdout, "%s %s\n", mark, c.Path)
		}
	case "list":
		printBranches(e.stdout, resp.Branches)
	case "mounts":
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MOUNTPOINT\tBASE\tBRANCH")
		for _, m := range resp.Mounts {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Mountpoint, m.Base, m.Branch)
		}
		tw.Flush()
	}
	return nil
}

// printBranches prints branches as an indented tree.
func printBranches(w io.Writer, bs []api.Branch) {
	kids := map[string][]api.Branch{}
	for _, b := range bs {
		kids[b.Parent] = append(kids[b.Parent], b)
	}
	for _, k := range kids {
		sort.Slice(k, func(i, j int) bool { return k[i].Name < k[j].Name })
	}
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		for _, b := range kids[parent] {
			mark := " "
			if b.Current {
				mark = "*"
			}
			fmt.Fprintf(w, "%s %s%s (%s)\n", mark, strings.Repeat("  ", depth), b.Name, b.State)
			walk(b.Name, depth+1)
		}
	}
	walk("", 0)
}
