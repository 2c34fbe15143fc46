package nodefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/internal/store"
)

// Journal is a directory of the daemon's where each write records the
// host path of its temporary before making it, and forgets it once the
// temporary is renamed or removed. A daemon killed mid-write leaves the
// record; Reap, at the next start, removes the temporary it names. (The
// store also drops such names from its layers at Open; a tree's root
// node writes straight into its base, which no one walks.) The records
// are not synced: they outlive the daemon's death, not the host's.
type Journal string

type journalKey struct{}

// WithJournal returns ctx carrying j: the writes made under it record
// their temporaries in j.
func WithJournal(ctx context.Context, j Journal) context.Context {
	return context.WithValue(ctx, journalKey{}, j)
}

// record notes host path p (a temporary about to be made) in ctx's
// journal, if it has one, and returns what forgets it.
func record(ctx context.Context, p string) (func(), error) {
	j, ok := ctx.Value(journalKey{}).(Journal)
	if !ok || j == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(string(j), 0o700); err != nil {
		return nil, fmt.Errorf("write journal: %w", err)
	}
	f := filepath.Join(string(j), filepath.Base(p))
	if err := os.WriteFile(f, []byte(p), 0o600); err != nil {
		return nil, fmt.Errorf("write journal: %w", err)
	}
	return func() { os.Remove(f) }, nil
}

// Reap removes the temporaries j's records name (writes a dead daemon
// left) and the records. Call it before any write under j, once the files
// the records name are reachable (the tree's mounts are up). A path whose
// directory is gone is forgotten; one reached through a symlink is left.
func (j Journal) Reap() (int, error) {
	ents, err := os.ReadDir(string(j))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range ents {
		f := filepath.Join(string(j), e.Name())
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := reapOne(string(b)); err == nil {
			n++
		} else if !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
		os.Remove(f)
	}
	return n, errors.Join(errs...)
}

// reapOne removes temporary p, its directory reached with no symlink.
func reapOne(p string) error {
	dir, name := filepath.Split(p)
	if !filepath.IsAbs(p) || !strings.HasPrefix(name, store.TempPrefix) {
		return fmt.Errorf("write journal: %q is not a write's temporary", p)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("write journal: %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Unlinkat(fd, name, 0); err != nil {
		return fmt.Errorf("write journal: %s: %w", p, err)
	}
	return nil
}
