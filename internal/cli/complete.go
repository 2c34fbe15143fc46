package cli

import (
	"context"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
)

// Shell completion of tree ids, node ids and branch names, asked of the
// daemon of the home if one answers; completion never starts a daemon.

// ask sends one request to a running daemon, within a second.
func (e *env) ask(req api.Request) (api.Response, bool) {
	cl := client.New(e.socketOrDefault())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := cl.Do(ctx, req)
	return r, err == nil
}

// completeTree completes TREE [NODE]: tree ids, then (with node) the
// tree's node ids, each described by its state and label.
func (e *env) completeTree(node bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		switch {
		case len(args) == 0:
			r, ok := e.ask(api.Request{Op: api.OpTreeList})
			if ok {
				for _, t := range r.Trees {
					out = append(out, cobra.CompletionWithDesc(t.ID, t.Base))
				}
			}
		case len(args) == 1 && node:
			r, ok := e.ask(api.Request{Op: api.OpTreeNodes, TreeID: args[0]})
			if ok {
				for _, n := range r.Nodes {
					desc := n.State
					if n.Label != "" {
						desc += " " + n.Label
					}
					out = append(out, cobra.CompletionWithDesc(n.ID, desc))
				}
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeMount completes MOUNTPOINT [BRANCH]: directories, then (with
// branch) the mount's branches.
func (e *env) completeMount(branch bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveFilterDirs
		}
		var out []cobra.Completion
		if len(args) == 1 && branch {
			mp, err := absPath(args[0])
			if err == nil {
				if r, ok := e.ask(api.Request{Op: api.OpWsList, Mountpoint: mp}); ok {
					for _, b := range r.Branches {
						out = append(out, cobra.CompletionWithDesc(b.Name, b.State))
					}
				}
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
