package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
)

func (e *env) treeCmd() *cobra.Command {
	t := &cobra.Command{
		Use:   "tree",
		Short: "Snapshot trees: fork, commit, abort, rollback, protect, prune, suspend, resume, evict",
		Long: `A tree is a rooted tree of nodes, one lineage of one environment, created from a
base directory and held under budgets (live nodes, RAM, disk). A node's files
are at its path (arbor tree nodes shows it) while it is live.`,
		Example: `  arbor tree create --base ~/src/app --id t1
  arbor tree fork t1 n1 --labels a,b,c
  arbor tree commit t1 n2
  arbor tree nodes t1`,
		Args:              subcommandArgs,
		RunE:              helpRunE,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	t.AddCommand(withOps(e.treeCreateCmd(), api.OpTreeCreate), withOps(e.treeForkCmd(), api.OpTreeFork, api.OpTreeForkBatch),
		withOps(e.treeRollbackCmd(), api.OpTreeRollback), withOps(e.treeDiffCmd(), api.OpTreeDiff),
		withOps(e.treeRebaseCmd(), api.OpTreeRebase))
	for _, v := range []struct{ name, op, short, long, done string }{
		{"commit", api.OpTreeCommit, "Make a node's state its parent's (first commit wins)",
			"Applies NODE's changes to its parent atomically and durably (into the base\ndirectory when the parent is the root). The siblings forked at the same point\nbecome stale.", "committed"},
		{"abort", api.OpTreeAbort, "Drop a node and its subtree", "Drops NODE and every node below it.", "aborted"},
		{"protect", api.OpTreeProtect, "Never evict or implicitly prune a node", "A protected node is never evicted and refuses the prune of an ancestor.", "protected"},
		{"unprotect", api.OpTreeUnprotect, "Undo protect", "Makes NODE evictable and prunable again.", "unprotected"},
		{"prune", api.OpTreePrune, "Delete a node and its whole subtree", "Deletes NODE and its subtree; refused if any of them is protected.", "pruned"},
		{"suspend", api.OpTreeSuspend, "Put a live node's state on disk", "Suspends NODE: its state stays on disk, costs no RAM, and its files are not\nwritable until resume.", "suspended"},
		{"resume", api.OpTreeResume, "Make a suspended node live again", "Resumes NODE: live and writable again at its path.", "resumed"},
	} {
		t.AddCommand(withOps(e.nodeVerbCmd(v.name, v.op, v.short, v.long, v.done), v.op))
	}
	for _, v := range []struct{ name, op, short, long string }{
		{"evict", api.OpTreeAutoEvict, "Suspend least recently used nodes now, as budget pressure would",
			"Suspends the least recently used unprotected live nodes while the tree is over\n85% of its RAM budget; never deletes state."},
		{"nodes", api.OpTreeNodes, "A tree's nodes, their state and paths", "Lists TREE's nodes with parent, state, label, protection, disk use and path,\nand the tree's usage against its budget."},
		{"drop", api.OpTreeDrop, "Forget a tree but keep it on disk",
			"Unloads TREE from the daemon but keeps its nodes and layers on disk: arbor tree\nopen loads it again. arbor tree delete removes it for good."},
		{"delete", api.OpTreeDelete, "Delete a tree: its nodes, layers and metadata",
			"Removes TREE for good: every node, the layers on disk and the tree's metadata.\nThe base directory is left as it is (committed changes stay in it). Loaded or\ndropped trees alike."},
		{"open", api.OpTreeOpen, "Load a dropped tree from disk", "Loads TREE again after arbor tree drop (or a failed reopen at start)."},
	} {
		t.AddCommand(withOps(e.treeIDCmd(v.name, v.op, v.short, v.long), v.op))
	}
	t.AddCommand(withOps(e.treeListCmd(), api.OpTreeList), withOps(e.treeWatchCmd(), api.OpTreeWatch))
	return t
}

// treeDo sends one tree request and prints its reply: JSON with -o json,
// else by text.
func (e *env) treeDo(req api.Request, out *outputFlag, text func(io.Writer, api.Response)) error {
	return e.withClient(func(cl *client.Client) error {
		resp, err := cl.Do(e.ctx, req)
		if err != nil {
			return err
		}
		if out.json {
			return json.NewEncoder(e.stdout).Encode(resp)
		}
		text(e.stdout, resp)
		return nil
	})
}

func (e *env) treeCreateCmd() *cobra.Command {
	var base, id, backend, image, network string
	var b api.Budget
	cmd := &cobra.Command{
		Use:   "create --base DIR",
		Short: "Create a tree over a base directory",
		Long: `Creates a tree whose root node is the base directory DIR (commits into the root
land in DIR). Budgets default to the daemon's (8 live nodes, 8 GiB RAM, no disk
limit: a --max-disk budget is exact, every write metered by the daemon).`,
		Example: "  arbor tree create --base ~/src/app\n  arbor tree create --base ~/src/app --id t1 --max-live 4\n  arbor tree create --base ~/src/app --backend jail --image py --network outbound",
		Args:    exactArgs(0, 0),
	}
	f := cmd.Flags()
	f.StringVar(&base, "base", "", "the base directory (required)")
	f.StringVar(&id, "id", "", "the tree id (default: the daemon picks one)")
	f.StringVar(&backend, "backend", "dir", "the backend: dir (files only) or jail (a process sandbox per live node)")
	f.StringVar(&image, "image", "", "jail: the image its sandboxes run on (arbor image build; default host: the host's /usr, /etc, ...)")
	f.StringVar(&network, "network", "", "jail: none (loopback only, the default) or outbound (through pasta; the gateway's address is the host's loopback)")
	f.IntVar(&b.MaxLiveNodes, "max-live", 0, "budget: max live nodes (0: default)")
	f.Int64Var(&b.MaxLiveRAMBytes, "max-ram", 0, "budget: max live RAM in bytes (0: default)")
	f.Int64Var(&b.MaxDiskBytes, "max-disk", 0, "budget: max disk in bytes, enforced exactly (every write metered by the daemon); 0: no limit")
	f.Int64Var(&b.MaxNodeRAMBytes, "max-node-ram", 0, "budget: memory each live node's processes may hold, in bytes (jail; 0: --max-ram)")
	f.Int64Var(&b.MaxNodePids, "max-node-pids", 0, "budget: processes and threads each live node may run (jail; 0: default 4096)")
	cmd.MarkFlagRequired("base")
	cmd.MarkFlagDirname("base")
	cmd.RegisterFlagCompletionFunc("backend", cobra.FixedCompletions([]string{"dir", "jail"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("network", cobra.FixedCompletions([]string{api.NetworkNone, api.NetworkOutbound}, cobra.ShellCompDirectiveNoFileComp))
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		abs, err := absPath(base)
		if err != nil {
			return err
		}
		req := api.Request{Op: api.OpTreeCreate, Base: abs, Backend: backend, TreeID: id, Image: image, Network: network}
		if b != (api.Budget{}) {
			req.Budget = &b
		}
		return e.treeDo(req, out, func(w io.Writer, resp api.Response) {
			fmt.Fprintf(w, "tree %s created, root %s\n", resp.TreeID, resp.Root)
		})
	}
	return cmd
}

// onceString is a string flag that refuses to be given twice (a plain one
// would keep the last and silently drop the others).
type onceString struct {
	v   string
	set bool
}

func (o *onceString) String() string { return o.v }
func (o *onceString) Type() string   { return "string" }
func (o *onceString) Set(s string) error {
	if o.set {
		return fmt.Errorf("given twice (%q and %q); --labels a,b makes several children", o.v, s)
	}
	o.v, o.set = s, true
	return nil
}

func (e *env) treeForkCmd() *cobra.Command {
	var label onceString
	var labels []string
	cmd := &cobra.Command{
		Use:   "fork TREE NODE",
		Short: "Make children of a node (one, or a batch under one pause)",
		Long: `Forks NODE: one child with --label, or one child per label of --labels under a
single pause of NODE (a batch). O(1) for files; children never see each other's
writes. Give --label or --labels, not both.`,
		Example:           "  arbor tree fork t1 n1 --label try\n  arbor tree fork t1 n1 --labels a,b,c",
		Args:              exactArgs(2, 2),
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().Var(&label, "label", "the new child's label")
	cmd.Flags().StringSliceVar(&labels, "labels", nil, "labels of a batch, one child each (comma-separated or repeated)")
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if label.set && cmd.Flags().Changed("labels") {
			return usagef("give --label (one child) or --labels (a batch), not both")
		}
		req := api.Request{Op: api.OpTreeFork, TreeID: args[0], SourceID: args[1], Label: label.v}
		if cmd.Flags().Changed("labels") {
			if len(labels) == 0 {
				return usagef("--labels: no labels given")
			}
			req = api.Request{Op: api.OpTreeForkBatch, TreeID: args[0], SourceID: args[1], Labels: labels}
		}
		return e.treeDo(req, out, printForks)
	}
	return cmd
}

func (e *env) treeRebaseCmd() *cobra.Command {
	var label onceString
	cmd := &cobra.Command{
		Use:   "rebase TREE NODE",
		Short: "Re-apply a (stale) node's changes on its parent's state now, as a new node",
		Long: `Forks NODE's parent as it is now into a new node and replays NODE's changes
(against its fork point) onto it: what only one side changed is taken, text
files both changed are merged line by line, and what cannot be merged is
listed (C PATH): conflict markers in a text file, or the parent's version kept
at PATH~theirs (PATH~theirs.1, ... if taken; against the parent's directory,
the node's version at PATH~ours). The new node cannot be committed until each is resolved.`,
		Example:           "  arbor tree rebase t1 n3\n  arbor tree rebase t1 n3 --label retry -o json",
		Args:              exactArgs(2, 2),
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().Var(&label, "label", "the new node's label")
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		req := api.Request{Op: api.OpTreeRebase, TreeID: args[0], NodeID: args[1], Label: label.v}
		return e.treeDo(req, out, func(w io.Writer, resp api.Response) {
			fmt.Fprintf(w, "rebased %s as %s at %s\n", args[1], resp.NodeID, resp.Path)
			printConflicts(w, resp.Conflicts)
		})
	}
	return cmd
}

// printConflicts lists a rebase's conflicts, a line each: C PATH.
func printConflicts(w io.Writer, conflicts []api.Conflict) {
	for _, c := range conflicts {
		if c.Aside != "" {
			fmt.Fprintf(w, "C %s (%s; the other version at %s)\n", c.Path, c.Kind, c.Aside)
		} else {
			fmt.Fprintf(w, "C %s (%s: conflict markers)\n", c.Path, c.Kind)
		}
	}
}

func (e *env) treeRollbackCmd() *cobra.Command {
	var label onceString
	cmd := &cobra.Command{
		Use:               "rollback TREE NODE",
		Short:             "Fork a new child from an older node; nothing is destroyed",
		Long:              "Makes a new child of NODE (an older state) without touching any other node.",
		Example:           "  arbor tree rollback t1 n1 --label again",
		Args:              exactArgs(2, 2),
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().Var(&label, "label", "the new child's label")
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.treeDo(api.Request{Op: api.OpTreeRollback, TreeID: args[0], NodeID: args[1], Label: label.v}, out, printForks)
	}
	return cmd
}

func printForks(w io.Writer, resp api.Response) {
	forks := resp.Forks
	if len(forks) == 0 && resp.NodeID != "" {
		forks = []api.Fork{{NodeID: resp.NodeID, Path: resp.Path, LatencyNS: resp.LatencyNS, Processes: resp.Processes}}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tLABEL\tLATENCY\tPATH")
	for _, f := range forks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.NodeID, f.Label, time.Duration(f.LatencyNS), f.Path)
	}
	tw.Flush()
	if resp.LatencyNS != 0 && len(forks) > 1 {
		fmt.Fprintf(w, "batch: %s\n", time.Duration(resp.LatencyNS))
	}
	if p := resp.Processes; p != "" {
		fmt.Fprintf(w, "processes: %s\n", p)
	}
}

// opsKey is the annotation naming the api verbs a command sends
// (comma-separated); TestEveryVerbHasACommand checks them against api's
// verb table.
const opsKey = "arbor.ops"

// withOps records on cmd the api verbs it sends.
func withOps(cmd *cobra.Command, ops ...string) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[opsKey] = strings.Join(ops, ",")
	return cmd
}

// nodeVerbCmd is a verb of the form VERB TREE NODE.
func (e *env) nodeVerbCmd(name, op, short, long, done string) *cobra.Command {
	cmd := &cobra.Command{
		Use:               name + " TREE NODE",
		Short:             short,
		Long:              long,
		Example:           fmt.Sprintf("  arbor tree %s t1 n2", name),
		Args:              exactArgs(2, 2),
		ValidArgsFunction: e.completeTree(true),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.treeDo(api.Request{Op: op, TreeID: args[0], NodeID: args[1]}, out, func(w io.Writer, resp api.Response) {
			fmt.Fprintf(w, "%s %s", done, args[1])
			if len(resp.Stale) > 0 {
				fmt.Fprintf(w, "; stale now: %s", strings.Join(resp.Stale, ", "))
			}
			fmt.Fprintln(w)
		})
	}
	return cmd
}

// treeDiffCmd is tree diff TREE NODE: the node's changes, each text diff
// after its path.
func (e *env) treeDiffCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "diff TREE NODE",
		Short: "What a node changed against its fork point, with text diffs",
		Long: `Lists what NODE changed against its fork point (A added, M modified, D deleted),
each regular text file followed by its unified diff. A file over 256 KiB, a
binary one, or one past 2 MiB of diff in all shows why it has none.`,
		Example:           "  arbor tree diff t1 n2\n  arbor tree diff t1 n2 -o json",
		Args:              exactArgs(2, 2),
		ValidArgsFunction: e.completeTree(true),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.treeDo(api.Request{Op: api.OpTreeDiff, TreeID: args[0], NodeID: args[1]}, out, func(w io.Writer, resp api.Response) {
			for _, c := range resp.Changes {
				fmt.Fprintln(w, changeLine(c))
				if c.Note != "" {
					fmt.Fprintf(w, "  (%s)\n", c.Note)
				}
				fmt.Fprint(w, c.Diff)
			}
		})
	}
	return cmd
}

// treeIDCmd is a verb of the form VERB TREE.
func (e *env) treeIDCmd(name, op, short, long string) *cobra.Command {
	cmd := &cobra.Command{
		Use:               name + " TREE",
		Short:             short,
		Long:              long,
		Example:           fmt.Sprintf("  arbor tree %s t1", name),
		Args:              exactArgs(1, 1),
		ValidArgsFunction: e.completeTree(false),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.treeDo(api.Request{Op: op, TreeID: args[0]}, out, func(w io.Writer, resp api.Response) {
			switch op {
			case api.OpTreeAutoEvict:
				if len(resp.Evicted) == 0 {
					fmt.Fprintln(w, "nothing to evict")
				} else {
					fmt.Fprintf(w, "evicted: %s\n", strings.Join(resp.Evicted, ", "))
				}
			case api.OpTreeNodes, api.OpTreeOpen:
				printNodes(w, resp)
			case api.OpTreeDrop:
				fmt.Fprintf(w, "dropped %s; it stays on disk (arbor tree open %s loads it, arbor tree delete %s removes it)\n", args[0], args[0], args[0])
			case api.OpTreeDelete:
				fmt.Fprintf(w, "deleted %s\n", args[0])
			}
		})
	}
	return cmd
}

func (e *env) treeListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "The daemon's loaded trees",
		Long:    "Lists the loaded trees: id, backend, base, nodes and live nodes.",
		Example: "  arbor tree list\n  arbor tree list -o json",
		Args:    exactArgs(0, 0),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.treeDo(api.Request{Op: api.OpTreeList}, out, func(w io.Writer, resp api.Response) {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TREE\tBACKEND\tBASE\tNODES\tLIVE\tIMAGE\tNETWORK")
			for _, t := range resp.Trees {
				im, nw := "", ""
				if t.Backend != "dir" {
					im, nw = cmp.Or(t.Image, "host"), cmp.Or(t.Network, api.NetworkNone)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", t.ID, t.Backend, t.Base, t.Usage.TotalNodes, t.Usage.LiveNodes, im, nw)
			}
			tw.Flush()
		})
	}
	return cmd
}

func printNodes(w io.Writer, resp api.Response) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPARENT\tSTATE\tLABEL\tPROTECTED\tDISK\tLAST ACTIVE\tPATH")
	for _, n := range resp.Nodes {
		p := ""
		if n.Protected {
			p = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.ID, n.Parent, n.State, n.Label, p, n.DiskBytes,
			time.Unix(0, n.LastActiveAt).Format(time.TimeOnly), n.Path)
	}
	tw.Flush()
	if resp.Usage != nil && resp.Budget != nil {
		disk := fmt.Sprintf("%d/%d bytes", resp.Usage.DiskBytes, resp.Budget.MaxDiskBytes)
		if resp.Budget.MaxDiskBytes == 0 {
			disk = fmt.Sprintf("%d bytes (no limit)", resp.Usage.DiskBytes)
		}
		fmt.Fprintf(w, "live %d/%d nodes, RAM %d/%d bytes, disk %s\n",
			resp.Usage.LiveNodes, resp.Budget.MaxLiveNodes, resp.Usage.LiveRAMBytes, resp.Budget.MaxLiveRAMBytes, disk)
	}
}

func (e *env) treeWatchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch [TREE]",
		Short: "Stream a tree's events (every tree's without TREE)",
		Long: `Prints the tree's nodes, then one line per event (fork, commit, abort, ...) as
it happens, until Ctrl-C or until the daemon ends the stream (the tree was
dropped or deleted, or the daemon stopped).`,
		Example:           "  arbor tree watch t1\n  arbor tree watch -o json",
		Args:              exactArgs(0, 1),
		ValidArgsFunction: e.completeTree(false),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		tree := ""
		if len(args) > 0 {
			tree = args[0]
		}
		return e.withClient(func(cl *client.Client) error { return e.watch(cl, tree, out.json) })
	}
	return cmd
}

// watch streams events until the user interrupts (a clean end, not an
// error) or the daemon ends the stream.
func (e *env) watch(cl *client.Client, tree string, asJSON bool) error {
	snap, ch, err := cl.WatchSnapshot(e.ctx, tree)
	if err != nil {
		if errors.Is(err, context.Canceled) && e.ctx.Err() != nil {
			return nil
		}
		return err
	}
	enc := json.NewEncoder(e.stdout)
	if asJSON {
		enc.Encode(snap)
	} else if len(snap.Nodes) > 0 {
		printNodes(e.stdout, snap)
	}
	for ev := range ch {
		if asJSON {
			enc.Encode(ev)
			continue
		}
		fmt.Fprintf(e.stdout, "%s %s %s %s\n", time.Unix(0, ev.TimeNS).Format(time.TimeOnly), ev.Kind, ev.TreeID, ev.NodeID)
	}
	if e.ctx.Err() != nil {
		return nil // interrupted: the way a watch ends
	}
	if !asJSON {
		fmt.Fprintln(e.stdout, "the daemon ended the watch")
	}
	return nil
}
