package fsbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/store"
)

// ArborSystems returns Arbor's systems: a branch at depth 1 and at depth 64
// (each level of the chain holds a change, so the layers are real), and
// "arbor-main", a mount that shows main, whose branches commit into the base
// directory.
func ArborSystems() []System {
	return []System{NewArbor(0), NewArbor(1), NewArbor(64)}
}

// NewArbor returns an Arbor mount showing a branch at the given depth (0:
// main, the base itself).
func NewArbor(depth int) System { return &arborSys{depth: depth} }

type arborSys struct {
	depth int
	st    *store.Store
	fs    *cowfs.FS
	leaf  string
	seq   atomic.Int64
}

func (a *arborSys) Name() string {
	if a.depth == 0 {
		return "arbor-main"
	}
	return fmt.Sprintf("arbor-d%d", a.depth)
}

func (a *arborSys) Setup(ctx context.Context, base, scratch string) (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s: needs root for a direct FUSE mount: %w", a.Name(), errors.ErrUnsupported)
	}
	st, err := store.Open(store.Config{Dir: filepath.Join(scratch, "store"), Base: base})
	if err != nil {
		return "", err
	}
	leaf := store.Main
	for i := 1; i <= a.depth; i++ {
		name := fmt.Sprintf("level-%d", i)
		if err := st.Fork(leaf, name); err != nil {
			st.Close()
			return "", err
		}
		b, _ := st.Branch(name)
		rel := fmt.Sprintf(".arbor-level-%d", i)
		if err := st.Create(b, rel, false, func(real string) error { return os.WriteFile(real, []byte("level"), 0o644) }); err != nil {
			st.Close()
			return "", err
		}
		leaf = name
	}
	mnt := filepath.Join(scratch, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		st.Close()
		return "", err
	}
	f, err := cowfs.Mount(cowfs.Config{Store: st, Mountpoint: mnt, Branch: leaf})
	if err != nil {
		st.Close()
		return "", err
	}
	a.st, a.fs, a.leaf = st, f, leaf
	return mnt, nil
}

func (a *arborSys) Teardown(ctx context.Context) error {
	if a.fs == nil {
		return nil
	}
	err := a.fs.Unmount(true)
	if err2 := a.st.Close(); err == nil {
		err = err2
	}
	a.fs, a.st = nil, nil
	return err
}

// Branch forks the branch the mount shows; the harness times it.
func (a *arborSys) Branch(ctx context.Context) (Branch, error) {
	name := fmt.Sprintf("bench-%d", a.seq.Add(1))
	if err := a.st.Fork(a.leaf, name); err != nil {
		return nil, err
	}
	return &arborBranch{a: a, name: name}, nil
}

type arborBranch struct {
	a    *arborSys
	name string
}

func (b *arborBranch) Root() string { return filepath.Join(b.a.fs.Mountpoint(), "@"+b.name) }

func (b *arborBranch) Commit(ctx context.Context, opts CommitOptions) error {
	if opts.IntoBase != (b.a.depth == 0) {
		return fmt.Errorf("%s commits into %s only: %w", b.a.Name(), map[bool]string{true: "the base", false: "a branch"}[b.a.depth == 0], errors.ErrUnsupported)
	}
	_, err := b.a.fs.Commit(b.name, opts.Durable)
	return err
}

func (b *arborBranch) Abort(ctx context.Context) error { return b.a.st.Abort(b.name) }
