package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/engine"
)

func TestTreeDiff(t *testing.T) {
	e := newEngine(t, t.TempDir())
	base := newBase(t) // a.txt: "base"
	os.WriteFile(filepath.Join(base, "gone.txt"), []byte("bye\n"), 0o644)
	c := do(t, e, api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "d"})
	f := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "d", SourceID: c.Root, Label: "x"})
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(f.Path, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "base\nmore\n")
	write("new.txt", "hello\nworld\n")
	write("bin", "\x00\x01\x02")
	write("huge.txt", strings.Repeat("line\n", engine.DiffFileMax/5+1))
	os.Remove(filepath.Join(f.Path, "gone.txt"))

	r := do(t, e, api.Request{Op: api.OpTreeDiff, TreeID: "d", NodeID: f.NodeID})
	if r.Status != api.OpTreeDiff || r.NodeID != f.NodeID {
		t.Fatalf("reply %+v", r)
	}
	got := map[string]api.Change{}
	var order []string
	for _, ch := range r.Changes {
		got[ch.Path] = ch
		order = append(order, ch.Path)
	}
	if strings.Join(order, " ") != "a.txt bin gone.txt huge.txt new.txt" {
		t.Fatalf("paths %v", order)
	}
	want := map[string]struct{ kind, diff, note string }{
		"a.txt":    {"modified", "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n-base\n\\ No newline at end of file\n+base\n+more\n", ""},
		"new.txt":  {"added", "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n", ""},
		"gone.txt": {"deleted", "", ""},
		"bin":      {"added", "", "no diff: binary"},
		"huge.txt": {"added", "", "over"},
	}
	for p, w := range want {
		ch := got[p]
		if ch.Kind != w.kind || ch.Diff != w.diff || !strings.Contains(ch.Note, w.note) || (w.note == "") != (ch.Note == "") {
			t.Errorf("%s: %+v\nwant kind %s diff %q note ~%q", p, ch, w.kind, w.diff, w.note)
		}
	}

	for _, bad := range []struct {
		node string
		want error
	}{{c.Root, api.ErrBadRequest}, {"n99", api.ErrNotFound}, {"", api.ErrBadRequest}} {
		_, err := e.Do(t.Context(), api.Request{Op: api.OpTreeDiff, TreeID: "d", NodeID: bad.node})
		wantErr(t, err, bad.want, "tree_diff "+bad.node)
	}
	_, err := e.Do(t.Context(), api.Request{Op: api.OpTreeDiff, TreeID: "nope", NodeID: f.NodeID})
	wantErr(t, err, api.ErrNotFound, "tree_diff of an unknown tree")
	// Another user may not read the tree's changes.
	other := access.WithCred(t.Context(), access.Cred{UID: 54321, GID: 54321})
	_, err = e.Do(other, api.Request{Op: api.OpTreeDiff, TreeID: "d", NodeID: f.NodeID})
	wantErr(t, err, api.ErrForbidden, "tree_diff by another uid")
}

// TestTreeDiffTotalCap: past the reply's total, changes keep their paths
// and get a note instead of a diff.
func TestTreeDiffTotalCap(t *testing.T) {
	e := newEngine(t, t.TempDir())
	c := do(t, e, api.Request{Op: api.OpTreeCreate, Base: newBase(t), TreeID: "d"})
	f := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "d", SourceID: c.Root})
	n := engine.DiffTotalMax/(200<<10) + 2
	for i := range n {
		os.WriteFile(filepath.Join(f.Path, "f"+string(rune('a'+i))), []byte(strings.Repeat("0123456789\n", 200<<10/11)), 0o644)
	}
	r := do(t, e, api.Request{Op: api.OpTreeDiff, TreeID: "d", NodeID: f.NodeID})
	total, noted := 0, 0
	for _, ch := range r.Changes {
		total += len(ch.Diff)
		if strings.Contains(ch.Note, "past") {
			noted++
		}
	}
	if len(r.Changes) != n || total > engine.DiffTotalMax || noted == 0 || noted == n {
		t.Fatalf("%d changes, %d bytes of diff, %d noted", len(r.Changes), total, noted)
	}
}

// TestTextDiffHunks: hunks as GNU diff -u makes them (the wants are its
// output): apart, merged across up to 6 equal lines, at the start, at the end.
func TestTextDiffHunks(t *testing.T) {
	reg := func(s string) engine.FileVersion {
		return engine.FileVersion{Exists: true, Regular: true, Size: int64(len(s)), Data: []byte(s)}
	}
	for _, c := range []struct{ a, b, want string }{
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n", "1\ntwo\n3\n4\n5\n6\n7\n8\n9\nten\nten2\n11\n12\n13\n14\n15\n16\n17\neighteen\n19\n20\n", "--- a/p\n+++ b/p\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -7,7 +7,8 @@\n 7\n 8\n 9\n-10\n+ten\n+ten2\n 11\n 12\n 13\n@@ -15,6 +16,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n", "1\ntwo\n3\n4\n5\n6\n7\n8\nnine\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n", "--- a/p\n+++ b/p\n@@ -1,12 +1,12 @@\n 1\n-2\n+two\n 3\n 4\n 5\n 6\n 7\n 8\n-9\n+nine\n 10\n 11\n 12\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n", "4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n", "--- a/p\n+++ b/p\n@@ -1,6 +1,3 @@\n-1\n-2\n-3\n 4\n 5\n 6\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n21\n", "--- a/p\n+++ b/p\n@@ -18,3 +18,4 @@\n 18\n 19\n 20\n+21\n"},
	} {
		if d, _ := engine.TextDiff("p", reg(c.a), reg(c.b)); d != c.want {
			t.Errorf("TextDiff(%q, %q) =\n%s\nwant\n%s", c.a, c.b, d, c.want)
		}
	}
}

func TestTextDiff(t *testing.T) {
	reg := func(s string) engine.FileVersion {
		return engine.FileVersion{Exists: true, Regular: true, Size: int64(len(s)), Data: []byte(s)}
	}
	for _, c := range []struct {
		then, now  engine.FileVersion
		diff, note string
	}{
		{reg("a\nb\nc\nd\ne\nf\ng\nh\n"), reg("a\nb\nc\nd\nE\nf\ng\nh\n"), "--- a/p\n+++ b/p\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n", ""},
		{reg("x"), reg("y"), "--- a/p\n+++ b/p\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n", ""},
		{engine.FileVersion{}, reg(""), "", "no text change (mode or metadata)"},
		{reg("a\n"), engine.FileVersion{Exists: true}, "", ""}, // now a symlink: no diff, no note
		{engine.FileVersion{Exists: true}, reg("t\n"), "--- /dev/null\n+++ b/p\n@@ -0,0 +1 @@\n+t\n", ""},
		{reg("a\n"), engine.FileVersion{Exists: true, Regular: true, Size: 1 << 30}, "", "no diff: 1073741824 bytes now, over 262144"},
		{reg("\xff\xfe"), reg("a\n"), "", "no diff: binary"},
	} {
		d, n := engine.TextDiff("p", c.then, c.now)
		if d != c.diff || n != c.note {
			t.Errorf("TextDiff(%+v, %+v) = %q, %q; want %q, %q", c.then, c.now, d, n, c.diff, c.note)
		}
	}
}
