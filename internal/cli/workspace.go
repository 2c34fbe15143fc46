package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
)

// workspaceCmds are the commands on a workspace mount.
func (e *env) workspaceCmds() []*cobra.Command {
	return []*cobra.Command{
		withOps(e.mountCmd(), api.OpWsMount), withOps(e.createCmd(), api.OpWsCreate),
		e.mpCmd("diff", api.OpWsDiff, "Added, modified and deleted paths of a branch since its fork point",
			"Lists what BRANCH (default: the branch the mount shows) changed against its fork\npoint: A added, M modified, D deleted.",
			"  arbor diff ~/ws\n  arbor diff ~/ws try-a -o json"),
		withOps(e.commitCmd(), api.OpWsCommit),
		e.mpCmd("abort", api.OpWsAbort, "Drop a branch and its subtree",
			"Drops BRANCH (default: the branch the mount shows) and every branch forked from\nit. A mount that showed it shows its parent afterwards.",
			"  arbor abort ~/ws try-b"),
		withOps(e.switchCmd(), api.OpWsSwitch),
		withOps(e.rebaseCmd(), api.OpWsList, api.OpTreeRebase),
		e.mpCmd("list", api.OpWsList, "The branches of a mount, as a tree with their state",
			"Prints the branches as an indented tree; * marks the one the mount root shows.",
			"  arbor list ~/ws"),
		e.mpCmd("unmount", api.OpWsUnmount, "Unmount a workspace mount",
			"Unmounts MOUNTPOINT. Its branches stay on disk: arbor mount of the same base\nshows them again. A mount in use (a process's cwd or open file in it) is refused.",
			"  arbor unmount ~/ws"),
		withOps(e.mountsCmd(), api.OpWsMounts),
	}
}

func (e *env) mountCmd() *cobra.Command {
	var base, branch string
	var hide bool
	cmd := &cobra.Command{
		Use:   "mount --base DIR MOUNTPOINT",
		Short: "Mount a base directory's branches at MOUNTPOINT",
		Long: `Mounts the branches of the base directory DIR at MOUNTPOINT. The root shows
main (DIR itself) unless --branch names another; every branch is at
MOUNTPOINT/@NAME/. The daemon remembers the mount and re-establishes it after a
restart; mounting the same base at the same mountpoint again succeeds.`,
		Example: "  arbor mount --base ~/src/app ~/ws\n  arbor mount --base ~/src/app --branch try-a ~/ws",
		Args:    exactArgs(1, 1),
	}
	cmd.Flags().StringVar(&base, "base", "", "the base directory (required)")
	cmd.Flags().StringVar(&branch, "branch", "", "the branch the mount root shows (default main)")
	cmd.Flags().BoolVar(&hide, "hide-control", false, "serve no .branchfs_ctl files (branches change only through arbor)")
	cmd.MarkFlagRequired("base")
	cmd.MarkFlagDirname("base")
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		b, err := absPath(base)
		if err != nil {
			return err
		}
		mp, err := absPath(args[0])
		if err != nil {
			return err
		}
		req := api.Request{Op: api.OpWsMount, Base: b, Mountpoint: mp, Branch: branch, HideControl: hide}
		return e.wsDo(req, out, func(w io.Writer, resp api.Response) {
			if resp.AlreadyMounted {
				fmt.Fprintf(w, "already mounted: %s at %s (showing %s)\n", b, mp, resp.Branch)
				return
			}
			fmt.Fprintf(w, "mounted %s at %s (showing %s)\n", b, mp, resp.Branch)
		})
	}
	return cmd
}

func (e *env) createCmd() *cobra.Command {
	var parent string
	var quota int64
	cmd := &cobra.Command{
		Use:   "create NAME MOUNTPOINT",
		Short: "Fork a branch NAME from PARENT (default: the branch the mount shows)",
		Long: `Forks PARENT (default: the branch the mount root shows) into a new branch NAME,
O(1). If the mount showed PARENT it shows NAME afterwards; NAME is also at
MOUNTPOINT/@NAME/.`,
		Example: "  arbor create try-a ~/ws\n  arbor create try-b ~/ws -p main --quota 1073741824",
		Args:    exactArgs(2, 2),
	}
	cmd.Flags().StringVarP(&parent, "parent", "p", "", "the parent branch (default: the branch the mount shows)")
	cmd.Flags().Int64Var(&quota, "quota", 0, "the branch's storage limit in bytes (0: none)")
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		mp, err := absPath(args[1])
		if err != nil {
			return err
		}
		req := api.Request{Op: api.OpWsCreate, Branch: args[0], Parent: parent, QuotaBytes: quota, Mountpoint: mp}
		return e.wsDo(req, out, func(w io.Writer, resp api.Response) { fmt.Fprintf(w, "created %s\n", args[0]) })
	}
	return cmd
}

func (e *env) commitCmd() *cobra.Command {
	var noDurable bool
	cmd := &cobra.Command{
		Use:   "commit MOUNTPOINT [BRANCH]",
		Short: "Land a branch's changes in its parent (first commit wins)",
		Long: `Applies BRANCH's changes (default: the branch the mount shows) to its parent,
atomically; into main means into the base directory, durably unless
--no-durable. It succeeds only if the parent has not changed since BRANCH's fork
point; the siblings forked at the same point become stale.`,
		Example:           "  arbor commit ~/ws\n  arbor commit ~/ws try-a",
		Args:              exactArgs(1, 2),
		ValidArgsFunction: e.completeMount(true),
	}
	cmd.Flags().BoolVar(&noDurable, "no-durable", false, "do not fsync a commit into the base")
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		req, err := mpRequest(api.OpWsCommit, args)
		if err != nil {
			return err
		}
		if noDurable {
			f := false
			req.Durable = &f
		}
		return e.wsDo(req, out, func(w io.Writer, resp api.Response) {
			fmt.Fprintf(w, "committed into %s", resp.Branch)
			if len(resp.Stale) > 0 {
				fmt.Fprintf(w, "; stale now: %s", strings.Join(resp.Stale, ", "))
			}
			fmt.Fprintln(w)
		})
	}
	return cmd
}

func (e *env) rebaseCmd() *cobra.Command {
	var name onceString
	cmd := &cobra.Command{
		Use:   "rebase MOUNTPOINT [BRANCH]",
		Short: "Re-apply a (stale) branch's changes on its parent as it is now, as a new branch",
		Long: `Forks BRANCH's parent (default: the branch the mount shows) as it is now into a
new branch and replays BRANCH's changes against its fork point onto it, as
arbor tree rebase does on the mount's tree: what only one side changed is
taken, text files both changed are merged line by line, and what cannot be
merged is listed (C PATH): conflict markers in a text file, or the parent's
version kept at PATH~theirs (PATH~theirs.1, ... if taken; against the parent's
directory, the branch's version at PATH~ours). The new branch cannot be
committed until each is resolved; BRANCH is left as it was (abort it when
done). The mount keeps showing what it showed.`,
		Example:           "  arbor rebase ~/ws try-b --name try-b2\n  arbor rebase ~/ws try-b -o json",
		Args:              exactArgs(1, 2),
		ValidArgsFunction: e.completeMount(true),
	}
	cmd.Flags().Var(&name, "name", "the new branch's name (default: its node id)")
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		list, err := mpRequest(api.OpWsList, args)
		if err != nil {
			return err
		}
		branch := list.Branch
		list.Branch = ""
		if err := e.checkOwner(list.Mountpoint); err != nil {
			return err
		}
		cl, err := e.connectFor(list.Mountpoint)
		if err != nil {
			return err
		}
		defer cl.Close()
		ws, err := cl.Do(e.ctx, list)
		if err != nil {
			return err
		}
		if branch == "" {
			branch = ws.Branch
		}
		node := ""
		for _, b := range ws.Branches {
			if b.Name == branch || b.NodeID == branch {
				node = b.NodeID
			}
		}
		if node == "" {
			return api.Errorf(api.ErrNotFound, "rebase: no branch %q in %s", branch, list.Mountpoint)
		}
		resp, err := cl.Do(e.ctx, api.Request{Op: api.OpTreeRebase, TreeID: ws.TreeID, NodeID: node, Label: name.v})
		if err != nil {
			return err
		}
		resp.Branch = resp.NodeID // as the mount names it: its label if no other node has it
		if ws, err = cl.Do(e.ctx, list); err == nil {
			for _, b := range ws.Branches {
				if b.NodeID == resp.NodeID {
					resp.Branch = b.Name
				}
			}
		}
		if out.json {
			return json.NewEncoder(e.stdout).Encode(resp)
		}
		fmt.Fprintf(e.stdout, "rebased %s as %s (%s)\n", branch, resp.Branch, filepath.Join(list.Mountpoint, "@"+resp.Branch))
		printConflicts(e.stdout, resp.Conflicts)
		return nil
	}
	return cmd
}

func (e *env) switchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "switch MOUNTPOINT BRANCH",
		Short:             "Show BRANCH at the mount root",
		Long:              "Makes the mount root show BRANCH. Open files keep the branch they were opened in.",
		Example:           "  arbor switch ~/ws try-a",
		Args:              exactArgs(2, 2),
		ValidArgsFunction: e.completeMount(true),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		mp, err := absPath(args[0])
		if err != nil {
			return err
		}
		req := api.Request{Op: api.OpWsSwitch, Mountpoint: mp, Branch: args[1]}
		return e.wsDo(req, out, func(w io.Writer, resp api.Response) { fmt.Fprintf(w, "showing %s\n", resp.Branch) })
	}
	return cmd
}

// mpCmd is a command of the form VERB MOUNTPOINT [BRANCH] (unmount takes
// only the mountpoint).
func (e *env) mpCmd(name, op, short, long, example string) *cobra.Command {
	use, max := name+" MOUNTPOINT [BRANCH]", 2
	if op == api.OpWsUnmount || op == api.OpWsList {
		use, max = name+" MOUNTPOINT", 1
	}
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Example: example, Args: exactArgs(1, max),
		ValidArgsFunction: e.completeMount(max == 2)}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		req, err := mpRequest(op, args)
		if err != nil {
			return err
		}
		return e.wsDo(req, out, func(w io.Writer, resp api.Response) {
			switch op {
			case api.OpWsAbort:
				fmt.Fprintf(w, "aborted %s; the mount shows %s\n", orCurrent(req.Branch), resp.Branch)
			case api.OpWsUnmount:
				fmt.Fprintf(w, "unmounted %s\n", req.Mountpoint)
			case api.OpWsDiff:
				for _, c := range resp.Changes {
					fmt.Fprintln(w, changeLine(c))
				}
			case api.OpWsList:
				printBranches(w, resp.Branches)
			}
		})
	}
	return withOps(cmd, op)
}

// changeLine is a diff's line for one path: A, M or D and the path, and
// "(metadata only)" where only its mode, owner, times or xattrs changed.
func changeLine(c api.Change) string {
	mark := map[string]string{"added": "A", "modified": "M", "deleted": "D"}[c.Kind]
	if c.Meta {
		return mark + " " + c.Path + " (metadata only)"
	}
	return mark + " " + c.Path
}

func orCurrent(branch string) string {
	if branch == "" {
		return "the current branch"
	}
	return branch
}

func mpRequest(op string, args []string) (api.Request, error) {
	mp, err := absPath(args[0])
	if err != nil {
		return api.Request{}, err
	}
	req := api.Request{Op: op, Mountpoint: mp}
	if len(args) > 1 {
		req.Branch = args[1]
	}
	return req, nil
}

func (e *env) mountsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "mounts",
		Short:   "Every workspace mount of the daemon",
		Long:    "Lists the daemon's workspace mounts: mountpoint, base directory, the branch shown.",
		Example: "  arbor mounts\n  arbor mounts -o json",
		Args:    exactArgs(0, 0),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.wsDo(api.Request{Op: api.OpWsMounts}, out, func(w io.Writer, resp api.Response) {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MOUNTPOINT\tBASE\tBRANCH")
			for _, m := range resp.Mounts {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Mountpoint, m.Base, m.Branch)
			}
			tw.Flush()
		})
	}
	return cmd
}

// wsDo sends a workspace request and prints its reply: as JSON with -o
// json, else by text. A request naming a mountpoint first checks that no
// other daemon's mount is there (see checkOwner); one on an existing mount
// does not start a daemon that could not know the mount.
func (e *env) wsDo(req api.Request, out *outputFlag, text func(io.Writer, api.Response)) error {
	if req.Op != api.OpWsMounts {
		if err := e.checkOwner(req.Mountpoint); err != nil {
			return err
		}
	}
	connect := e.connect
	if req.Op != api.OpWsMount && req.Op != api.OpWsMounts {
		connect = func() (*client.Client, error) { return e.connectFor(req.Mountpoint) }
	}
	cl, err := connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Do(e.ctx, req)
	if err != nil {
		return err
	}
	if out.json {
		return json.NewEncoder(e.stdout).Encode(resp)
	}
	text(e.stdout, resp)
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
	// A branch whose parent is not listed is shown too, at the top: the
	// table never hides what -o json shows.
	names := map[string]bool{}
	for _, b := range bs {
		names[b.Name] = true
	}
	var orphans []string
	for p := range kids {
		if p != "" && !names[p] {
			orphans = append(orphans, p)
		}
	}
	sort.Strings(orphans)
	for _, p := range orphans {
		walk(p, 0)
	}
}
