package client

import (
	"context"
	"fmt"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// TreeSpec describes a tree to create.
type TreeSpec struct {
	TreeID  string      // optional: the daemon picks one if empty
	Base    string      // the base: a directory today
	Backend string      // dir, jail, vm; empty for the daemon's default
	Budget  *api.Budget // nil for the default budget
}

// Ping returns the daemon's version.
func (c *Client) Ping(ctx context.Context) (string, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpPing})
	return r.Version, err
}

// TreeCreate creates a tree; the reply carries TreeID, Root (the root node)
// and Path (where its files are).
func (c *Client) TreeCreate(ctx context.Context, spec TreeSpec) (api.Response, error) {
	return c.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: spec.TreeID, Base: spec.Base, Backend: spec.Backend, Budget: spec.Budget})
}

// Fork makes one child of source.
func (c *Client) Fork(ctx context.Context, treeID, sourceID, label string) (api.Fork, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: treeID, SourceID: sourceID, Label: label})
	return oneFork(r, err)
}

// ForkBatch makes one child of source per label under one pause of the
// source; it returns the children and the daemon-measured batch latency.
func (c *Client) ForkBatch(ctx context.Context, treeID, sourceID string, labels []string) ([]api.Fork, time.Duration, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeForkBatch, TreeID: treeID, SourceID: sourceID, Labels: labels})
	if err != nil {
		return nil, 0, err
	}
	return r.Forks, time.Duration(r.LatencyNS), nil
}

// Rollback makes a new child of an older node; nothing is destroyed.
func (c *Client) Rollback(ctx context.Context, treeID, nodeID, label string) (api.Fork, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeRollback, TreeID: treeID, NodeID: nodeID, Label: label})
	return oneFork(r, err)
}

func oneFork(r api.Response, err error) (api.Fork, error) {
	if err != nil {
		return api.Fork{}, err
	}
	if len(r.Forks) == 1 {
		return r.Forks[0], nil
	}
	if r.NodeID != "" {
		return api.Fork{NodeID: r.NodeID, Path: r.Path, LatencyNS: r.LatencyNS, Processes: r.Processes}, nil
	}
	return api.Fork{}, fmt.Errorf("arbor client: fork reply names no node (status %q)", r.Status)
}

// Commit makes node's state its parent's (first commit wins: a lost race is
// api.ErrStale); it returns the siblings that became stale.
func (c *Client) Commit(ctx context.Context, treeID, nodeID string) ([]string, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeCommit, TreeID: treeID, NodeID: nodeID})
	return r.Stale, err
}

func (c *Client) nodeVerb(ctx context.Context, op, treeID, nodeID string) error {
	_, err := c.Do(ctx, api.Request{Op: op, TreeID: treeID, NodeID: nodeID})
	return err
}

// Abort drops node and its subtree.
func (c *Client) Abort(ctx context.Context, treeID, nodeID string) error {
	return c.nodeVerb(ctx, api.OpTreeAbort, treeID, nodeID)
}

// Protect exempts node from eviction and implicit pruning.
func (c *Client) Protect(ctx context.Context, treeID, nodeID string) error {
	return c.nodeVerb(ctx, api.OpTreeProtect, treeID, nodeID)
}

// Unprotect undoes Protect.
func (c *Client) Unprotect(ctx context.Context, treeID, nodeID string) error {
	return c.nodeVerb(ctx, api.OpTreeUnprotect, treeID, nodeID)
}

// Prune deletes node and its subtree, disk included.
func (c *Client) Prune(ctx context.Context, treeID, nodeID string) error {
	return c.nodeVerb(ctx, api.OpTreePrune, treeID, nodeID)
}

// Suspend puts node's state on disk and frees its RAM.
func (c *Client) Suspend(ctx context.Context, treeID, nodeID string) error {
	return c.nodeVerb(ctx, api.OpTreeSuspend, treeID, nodeID)
}

// Resume makes a suspended node live again and returns where its files are.
func (c *Client) Resume(ctx context.Context, treeID, nodeID string) (string, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeResume, TreeID: treeID, NodeID: nodeID})
	return r.Path, err
}

// AutoEvict suspends least recently active unprotected nodes until the tree
// fits its budget, and returns the suspended node ids.
func (c *Client) AutoEvict(ctx context.Context, treeID string) ([]string, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeAutoEvict, TreeID: treeID})
	return r.Evicted, err
}

// Nodes returns the tree's nodes (reply.Nodes) with its Usage and Budget.
func (c *Client) Nodes(ctx context.Context, treeID string) (api.Response, error) {
	return c.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: treeID})
}

// Diff returns what node changed against its fork point: each path's
// kind, and a unified diff of each regular text file within the daemon's
// caps (api.Change.Note says why one has none).
func (c *Client) Diff(ctx context.Context, treeID, nodeID string) ([]api.Change, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeDiff, TreeID: treeID, NodeID: nodeID})
	return r.Changes, err
}

// Rebase replays node's changes onto a new child of its parent's state now
// (tree_rebase) and returns the new node and the conflicts left.
func (c *Client) Rebase(ctx context.Context, treeID, nodeID, label string) (api.Fork, []api.Conflict, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeRebase, TreeID: treeID, NodeID: nodeID, Label: label})
	if err != nil {
		return api.Fork{}, nil, err
	}
	return api.Fork{NodeID: r.NodeID, Label: label, Path: r.Path}, r.Conflicts, nil
}

// List returns every tree.
func (c *Client) List(ctx context.Context) ([]api.Tree, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpTreeList})
	return r.Trees, err
}

// Drop forgets a tree: live nodes are torn down, disk is kept.
func (c *Client) Drop(ctx context.Context, treeID string) error {
	_, err := c.Do(ctx, api.Request{Op: api.OpTreeDrop, TreeID: treeID})
	return err
}

// Delete removes a tree for good: its nodes, layers and metadata (the base
// directory stays as it is).
func (c *Client) Delete(ctx context.Context, treeID string) error {
	_, err := c.Do(ctx, api.Request{Op: api.OpTreeDelete, TreeID: treeID})
	return err
}

// Open reopens a tree from disk after a restart.
func (c *Client) Open(ctx context.Context, treeID string) (api.Response, error) {
	return c.Do(ctx, api.Request{Op: api.OpTreeOpen, TreeID: treeID})
}
