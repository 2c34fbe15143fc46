package nodefs_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/internal/nodefs"
	"github.com/arbor-dev/arbor/internal/store"
)

// TestJournal: a write under a journal has its temporary named in it
// while the data comes and forgotten after; Reap removes a temporary a
// dead writer left, and neither a name that is not a temporary nor one
// reached through a symlinked directory.
func TestJournal(t *testing.T) {
	fs, files, _, outside := layout(t)
	j := nodefs.Journal(filepath.Join(t.TempDir(), "writes"))
	ctx := nodefs.WithJournal(context.Background(), j)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := fs.Write(ctx, "/workspace/f", 0, pr)
		done <- err
	}()
	pw.Write([]byte("half"))
	recs, _ := os.ReadDir(string(j))
	if len(recs) != 1 {
		t.Fatalf("journal during the write: %v", recs)
	}
	rec, _ := os.ReadFile(filepath.Join(string(j), recs[0].Name()))
	if filepath.Dir(string(rec)) != files || !strings.HasPrefix(filepath.Base(string(rec)), store.TempPrefix) {
		t.Errorf("the record names %q, want a temporary in %s", rec, files)
	}
	if _, err := os.Stat(string(rec)); err != nil {
		t.Errorf("the temporary it names: %v", err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if recs, _ := os.ReadDir(string(j)); len(recs) != 0 {
		t.Errorf("journal after the write: %v", recs)
	}

	// Left by a dead writer: a temporary, a file that is not one, and a
	// temporary's name reached through a symlink to a directory outside.
	left := filepath.Join(files, store.TempPrefix+"1-1")
	notTemp := filepath.Join(files, "precious")
	viaLink := filepath.Join(outside, store.TempPrefix+"1-3")
	for _, p := range []string{left, notTemp, viaLink} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(files, "out")); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{left, notTemp, filepath.Join(files, "out", filepath.Base(viaLink)), filepath.Join(files, store.TempPrefix+"gone")} {
		if err := os.WriteFile(filepath.Join(string(j), string(rune('a'+i))), []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := j.Reap()
	if n != 1 || err == nil {
		t.Errorf("Reap: %d removed, %v; want 1 and the refusals", n, err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("the temporary after Reap: %v", err)
	}
	for _, p := range []string{notTemp, viaLink} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s after Reap: %v", p, err)
		}
	}
	if recs, _ := os.ReadDir(string(j)); len(recs) != 0 {
		t.Errorf("journal after Reap: %v", recs)
	}
}
