package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// A writer the store still counts at a fork (its FUSE release not yet
// arrived) keeps its file where it writes; the fork's commit stays possible
// while that file is unchanged, and is stale once the writer writes.
func TestKeptWriterDoesNotStaleUnlessWritten(t *testing.T) {
	for _, parent := range []string{Main, "p"} {
		for _, write := range []bool{false, true} {
			base := t.TempDir()
			os.WriteFile(filepath.Join(base, "f"), []byte("0"), 0o644)
			s, err := Open(Config{Dir: t.TempDir(), Base: base})
			if err != nil {
				t.Fatal(err)
			}
			if parent != Main {
				if err := s.Fork(Main, parent); err != nil {
					t.Fatal(err)
				}
			}
			p, _ := s.Branch(parent)
			real, err := s.CopyUp(p, "f")
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(real, []byte("1"), 0o644)
			w := s.OpenWrite(real)
			if err := s.Fork(parent, "c"); err != nil {
				t.Fatal(err)
			}
			if write {
				// The writer writes through its descriptor after the fork.
				res, _ := s.Resolve(p, "f")
				os.WriteFile(res.Real, []byte("2"), 0o644)
			}
			s.CloseWrite(w)
			_, err = s.Commit("c", false)
			switch {
			case write && !errors.Is(err, api.ErrStale):
				t.Errorf("%s written after the fork: commit %v, want stale", parent, err)
			case !write && err != nil:
				t.Errorf("%s unchanged after the fork: commit %v", parent, err)
			}
			s.Close()
		}
	}
}
