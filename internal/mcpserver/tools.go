package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
)

// maxFork bounds the children of one fork (the engine's batch bound).
const maxFork = 1024

// Inputs and outputs of the tools. The jsonschema tags are the field
// descriptions an agent reads.

// TreeIn names a tree.
type TreeIn struct {
	TreeID string `json:"tree_id" jsonschema:"the tree's id, as create_tree or list_trees returned it"`
}

// NodeIn names a node of a tree.
type NodeIn struct {
	TreeID string `json:"tree_id" jsonschema:"the tree's id"`
	NodeID string `json:"node_id" jsonschema:"the node's id, as fork, nodes or create_tree returned it (the root's is create_tree's root)"`
}

// CreateTreeIn is create_tree's input.
type CreateTreeIn struct {
	Base            string `json:"base" jsonschema:"absolute path of the directory the tree starts from; commits into the root node write into it"`
	TreeID          string `json:"tree_id,omitempty" jsonschema:"the id to give the tree; omitted, the daemon picks one"`
	MaxLiveNodes    int    `json:"max_live_nodes,omitempty" jsonschema:"budget: most nodes live at once (default 8)"`
	MaxLiveRAMBytes int64  `json:"max_live_ram_bytes,omitempty" jsonschema:"budget: most RAM the live nodes hold, in bytes (default 8 GiB)"`
	MaxDiskBytes    int64  `json:"max_disk_bytes,omitempty" jsonschema:"budget: most disk the tree's nodes hold, in bytes (default 32 GiB)"`
	Backend         string `json:"backend,omitempty" jsonschema:"what each live node runs: dir (files only, the default) or jail (a process sandbox per node: exec works)"`
	Image           string `json:"image,omitempty" jsonschema:"backend jail only: the root filesystem image the sandboxes run on (list_images, build_image); omitted, the host's"`
}

// CreateTreeOut is create_tree's output.
type CreateTreeOut struct {
	TreeID string `json:"tree_id" jsonschema:"the new tree's id"`
	Root   string `json:"root" jsonschema:"the root node's id: fork it to start exploring"`
	Path   string `json:"path,omitempty" jsonschema:"where the root node's files can be read and written on the host"`
}

// TreesOut is list_trees' output.
type TreesOut struct {
	Trees []api.Tree `json:"trees" jsonschema:"every tree the daemon holds, with its usage and budget"`
}

// NodesOut is nodes' output, and the body of the nodes resource.
type NodesOut struct {
	TreeID string     `json:"tree_id"`
	Root   string     `json:"root" jsonschema:"the root node's id"`
	Nodes  []api.Node `json:"nodes" jsonschema:"every node: id, parent, children, state (live, suspended, stale), label, protected, sizes, and path when live"`
	Usage  api.Usage  `json:"usage" jsonschema:"what the tree holds now"`
	Budget api.Budget `json:"budget" jsonschema:"the tree's limits"`
}

// ForkIn is fork's input.
type ForkIn struct {
	NodeIn
	Count  int      `json:"count,omitempty" jsonschema:"how many children to make (default 1, or as many as labels)"`
	Labels []string `json:"labels,omitempty" jsonschema:"a label for each child, e.g. the strategy it will try"`
}

// ForkOut is fork's and rollback's output.
type ForkOut struct {
	Forks   []api.Fork `json:"forks" jsonschema:"the children made: node_id, label, and path where each child's files are"`
	Evicted []string   `json:"evicted,omitempty" jsonschema:"nodes suspended to make room under the budget"`
}

// CommitOut is commit's output.
type CommitOut struct {
	Parent string   `json:"parent" jsonschema:"the node that now holds the committed files"`
	Path   string   `json:"path,omitempty" jsonschema:"where the parent's files are"`
	Stale  []string `json:"stale" jsonschema:"siblings forked from the same point, now stale: abort or prune them"`
}

// RollbackIn is rollback's input.
type RollbackIn struct {
	NodeIn
	Label string `json:"label,omitempty" jsonschema:"a label for the new child"`
}

// DoneOut is the output of a verb that only succeeds or fails.
type DoneOut struct {
	TreeID  string   `json:"tree_id"`
	NodeID  string   `json:"node_id,omitempty"`
	Path    string   `json:"path,omitempty" jsonschema:"where the node's files are now (resume)"`
	Evicted []string `json:"evicted,omitempty" jsonschema:"nodes suspended to make room under the budget"`
}

// DiffOut is diff's output.
type DiffOut struct {
	Changes []api.Change `json:"changes" jsonschema:"paths the node changed against its fork point: kind (added, modified, deleted), path, and for a regular text file a unified diff (diff) or why there is none (note)"`
}

func (s *Server) addTools() {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}
	destructive := true
	gone := &mcp.ToolAnnotations{DestructiveHint: &destructive}
	keep := false
	mutating := &mcp.ToolAnnotations{DestructiveHint: &keep}
	idem := &mcp.ToolAnnotations{DestructiveHint: &keep, IdempotentHint: true}

	tool(s, &mcp.Tool{Name: "list_trees", Annotations: ro,
		Description: "List every tree the daemon holds, with its root node, usage and budget."},
		func(ctx context.Context, _ struct{}) (TreesOut, error) {
			r, err := s.call(ctx, api.Request{Op: api.OpTreeList})
			return TreesOut{Trees: nonNil(r.Trees)}, err
		})
	tool(s, &mcp.Tool{Name: "create_tree", Annotations: mutating,
		Description: "Create a tree over a base directory. Its root node shows the directory's files; fork the root to explore changes without touching the directory until a child is committed into the root."},
		func(ctx context.Context, in CreateTreeIn) (CreateTreeOut, error) {
			req := api.Request{Op: api.OpTreeCreate, TreeID: in.TreeID, Base: in.Base, Backend: in.Backend, Image: in.Image}
			if b := (api.Budget{MaxLiveNodes: in.MaxLiveNodes, MaxLiveRAMBytes: in.MaxLiveRAMBytes, MaxDiskBytes: in.MaxDiskBytes}); b != (api.Budget{}) {
				req.Budget = &b
			}
			r, err := s.call(ctx, req)
			return CreateTreeOut{TreeID: r.TreeID, Root: r.Root, Path: r.Path}, err
		})
	tool(s, &mcp.Tool{Name: "nodes", Annotations: ro,
		Description: "List a tree's nodes (parent, children, state, label, protection, RAM and disk, path of live nodes) with the tree's usage and budget."},
		func(ctx context.Context, in TreeIn) (NodesOut, error) {
			return s.nodes(ctx, in.TreeID)
		})
	tool(s, &mcp.Tool{Name: "fork", Annotations: mutating,
		Description: "Fork a node into children (count of them, or one per label). Each child starts from the node's current files and is isolated from its siblings and from the node; write in a child through its path. Fails with budget when the tree's budget cannot fit them."},
		func(ctx context.Context, in ForkIn) (ForkOut, error) {
			labels, err := forkLabels(in)
			if err != nil {
				return ForkOut{}, err
			}
			req := api.Request{Op: api.OpTreeForkBat, TreeID: in.TreeID, SourceID: in.NodeID, Labels: labels}
			if len(labels) == 1 {
				req.Op, req.Labels, req.Label = api.OpTreeFork, nil, labels[0]
			}
			r, err := s.call(ctx, req)
			return ForkOut{Forks: nonNil(r.Forks), Evicted: r.Evicted}, err
		})
	tool(s, &mcp.Tool{Name: "commit", Annotations: mutating,
		Description: "Commit a node into its parent: the node's changes become the parent's files, atomically (into the base directory when the parent is the root). First commit wins: it fails with stale if a sibling committed first. Siblings forked from the same point become stale."},
		func(ctx context.Context, in NodeIn) (CommitOut, error) {
			r, err := s.call(ctx, api.Request{Op: api.OpTreeCommit, TreeID: in.TreeID, NodeID: in.NodeID})
			return CommitOut{Parent: r.NodeID, Path: r.Path, Stale: nonNil(r.Stale)}, err
		})
	nodeTool := func(name, op, desc string, ann *mcp.ToolAnnotations) {
		tool(s, &mcp.Tool{Name: name, Description: desc, Annotations: ann}, func(ctx context.Context, in NodeIn) (DoneOut, error) {
			r, err := s.call(ctx, api.Request{Op: op, TreeID: in.TreeID, NodeID: in.NodeID})
			return DoneOut{TreeID: in.TreeID, NodeID: in.NodeID, Path: r.Path, Evicted: r.Evicted}, err
		})
	}
	nodeTool("abort", api.OpTreeAbort, "Abort a node: drop it and its whole subtree (its changes are lost). The usual end of a stale or failed branch.", gone)
	nodeTool("prune", api.OpTreePrune, "Prune a node: delete it and its whole subtree. Fails with protected if the subtree holds a protected node.", gone)
	nodeTool("protect", api.OpTreeProtect, "Protect a node: it is never evicted and never pruned implicitly.", idem)
	nodeTool("unprotect", api.OpTreeUnprot, "Remove a node's protection.", idem)
	nodeTool("suspend", api.OpTreeSuspend, "Suspend a live node: its state stays on disk, it costs no RAM, and its files cannot change until resume.", idem)
	nodeTool("resume", api.OpTreeResume, "Resume a suspended node: it becomes live again (other nodes may be suspended to fit the budget).", idem)
	tool(s, &mcp.Tool{Name: "rollback", Annotations: mutating,
		Description: "Fork a new child from an older node, to start again from that state without destroying anything."},
		func(ctx context.Context, in RollbackIn) (ForkOut, error) {
			r, err := s.call(ctx, api.Request{Op: api.OpTreeRollback, TreeID: in.TreeID, NodeID: in.NodeID, Label: in.Label})
			return ForkOut{Forks: nonNil(r.Forks), Evicted: r.Evicted}, err
		})
	tool(s, &mcp.Tool{Name: "diff", Annotations: ro,
		Description: "What a node changed against its fork point: each added, modified or deleted path, with a unified diff of each regular text file (up to 256 KiB a file and 2 MiB in all; past that, or for a binary file, a note says why there is none). The root has no fork point."},
		func(ctx context.Context, in NodeIn) (DiffOut, error) {
			r, err := s.call(ctx, api.Request{Op: api.OpTreeDiff, TreeID: in.TreeID, NodeID: in.NodeID})
			return DiffOut{Changes: nonNil(r.Changes)}, err
		})
	s.addSandboxTools(ro, mutating)
	s.addImageTools(ro, mutating)
}

// tool registers a typed tool whose errors become tool errors with our codes.
func tool[In, Out any](s *Server, t *mcp.Tool, f func(context.Context, In) (Out, error)) {
	mcp.AddTool(s.mcp, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		out, err := f(ctx, in)
		if err != nil {
			var zero Out
			return nil, zero, asToolError(err)
		}
		return nil, out, nil
	})
}

func (s *Server) nodes(ctx context.Context, treeID string) (NodesOut, error) {
	r, err := s.call(ctx, api.Request{Op: api.OpTreeNodes, TreeID: treeID})
	if err != nil {
		return NodesOut{}, err
	}
	out := NodesOut{TreeID: r.TreeID, Root: r.Root, Nodes: nonNil(r.Nodes)}
	if r.Usage != nil {
		out.Usage = *r.Usage
	}
	if r.Budget != nil {
		out.Budget = *r.Budget
	}
	return out, nil
}

// forkLabels gives one label per child: the labels, or count empty ones.
func forkLabels(in ForkIn) ([]string, error) {
	switch {
	case in.Count < 0:
		return nil, api.Errorf(api.ErrBadRequest, "fork: count %d is negative", in.Count)
	case in.Count > maxFork || len(in.Labels) > maxFork:
		return nil, api.Errorf(api.ErrBadRequest, "fork: at most %d children at once", maxFork)
	case len(in.Labels) > 0 && in.Count != 0 && in.Count != len(in.Labels):
		return nil, api.Errorf(api.ErrBadRequest, "fork: count %d but %d labels (give one, or both equal)", in.Count, len(in.Labels))
	case len(in.Labels) > 0:
		return in.Labels, nil
	}
	return make([]string, max(in.Count, 1)), nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
