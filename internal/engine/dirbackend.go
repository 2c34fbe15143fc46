package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/arbor-dev/arbor/api"
)

// OpenDirBackend opens the dir backend of one tree: files only. Its nodes
// run nothing (the agent's own processes use the node's path), so start,
// stop, suspend and resume are bookkeeping, every node holds no RAM, and
// Exec is api.ErrNotSupported. It keeps nothing on disk: after a restart it
// holds no node, and reconcile starts the live ones again (LostRestart).
func OpenDirBackend(ctx context.Context, cfg BackendConfig) (Backend, error) {
	if cfg.Image != "" {
		return nil, api.Errorf(api.ErrBadRequest, "backend %s runs no processes, so it has no images (--image needs --backend jail)", BackendDir)
	}
	if cfg.Network != "" {
		return nil, api.Errorf(api.ErrBadRequest, "backend %s runs no processes, so it has no network (--network needs --backend jail)", BackendDir)
	}
	return &dirBackend{nodes: map[string]HeldState{}}, nil
}

type dirBackend struct {
	mu    sync.Mutex           // guards nodes
	nodes map[string]HeldState // what the backend holds, by node id
}

func (d *dirBackend) Caps() Caps { return Caps{Lost: LostRestart} }

func (d *dirBackend) Start(ctx context.Context, node, path string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.nodes[node]; ok {
		return api.Errorf(api.ErrExists, "dir backend: start %s: already held", node)
	}
	d.nodes[node] = HeldLive
	return nil
}

func (d *dirBackend) Fork(ctx context.Context, source string, children []string, files func(context.Context) ([]string, error)) error {
	d.mu.Lock()
	_, ok := d.nodes[source]
	for _, c := range children {
		if _, dup := d.nodes[c]; dup {
			d.mu.Unlock()
			return api.Errorf(api.ErrExists, "dir backend: fork %s: child %s already held", source, c)
		}
	}
	d.mu.Unlock()
	if !ok {
		return api.Errorf(api.ErrNotFound, "dir backend: fork %s: not held", source)
	}
	// Nothing runs in source, so its pause is the files' fork itself.
	if _, err := files(ctx); err != nil {
		return fmt.Errorf("dir backend: fork %s: files: %w", source, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range children {
		d.nodes[c] = HeldLive
	}
	return nil
}

func (d *dirBackend) Suspend(ctx context.Context, node string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.nodes[node] {
	case HeldLive:
		d.nodes[node] = HeldSuspended
		return nil
	case HeldSuspended:
		return api.Errorf(api.ErrState, "dir backend: suspend %s: already suspended", node)
	}
	return api.Errorf(api.ErrNotFound, "dir backend: suspend %s: not held", node)
}

func (d *dirBackend) Resume(ctx context.Context, node, path string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nodes[node] == HeldLive {
		return api.Errorf(api.ErrState, "dir backend: resume %s: already live", node)
	}
	d.nodes[node] = HeldLive
	return nil
}

// Commit has nothing to carry: a dir node is its files.
func (d *dirBackend) Commit(ctx context.Context, child, parent string) error { return nil }

func (d *dirBackend) Stop(ctx context.Context, node string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.nodes, node)
	return nil
}

func (d *dirBackend) Exec(ctx context.Context, node string, cmd Command, out func(api.ExecOutput) error) (api.ExecExit, error) {
	return api.ExecExit{}, api.Errorf(api.ErrNotSupported,
		"exec on node %s: the dir backend runs no processes (files only); exec needs backend jail or vm", node)
}

func (d *dirBackend) RAM(ctx context.Context) (map[string]int64, error) { return nil, nil }

func (d *dirBackend) Nodes(ctx context.Context) ([]HeldNode, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]HeldNode, 0, len(d.nodes))
	for id, st := range d.nodes {
		out = append(out, HeldNode{ID: id, State: st})
	}
	slices.SortFunc(out, func(a, b HeldNode) int { return cmpString(a.ID, b.ID) })
	return out, nil
}

func (d *dirBackend) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.nodes)
	return nil
}
