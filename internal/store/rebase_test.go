package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// TestReplay: a stale branch's changes replayed onto a fresh fork of its
// parent's new state: one-sided changes taken, text merged line by line,
// overlapping text changes marked, binary changes kept both ways; the
// result refuses commit until the conflicts are resolved, then commits.
func TestReplay(t *testing.T) {
	text := "1\n2\n3\n4\n5\n6\n7\n8\n"
	f := newFixture(t, map[string]string{
		"merge": text, "clash": text, "bin": "\x00base", "gone": "g", "theirs-only": "t", "dir/keep": "k",
	})
	f.fork(Main, "win", "lose")
	w, l := f.br("win"), f.br("lose")
	f.write(w, "merge", strings.Replace(text, "8\n", "8 win\n", 1))
	f.write(w, "clash", strings.Replace(text, "4\n", "4 win\n", 1))
	f.write(w, "bin", "\x00win")
	f.write(w, "theirs-only", "t2")
	f.write(l, "merge", strings.Replace(text, "1\n", "1 lose\n", 1))
	f.write(l, "clash", strings.Replace(text, "4\n", "4 lose\n", 1))
	f.write(l, "bin", "\x00lose")
	f.write(l, "new", "added by lose")
	f.rm(l, "gone")
	f.mkdir(l, "newdir")
	f.write(l, "newdir/x", "x")
	f.commit("win", true)
	if !f.s.IsStale(f.br("lose")) {
		t.Fatal("lose is not stale")
	}
	f.fork(Main, "r")
	cs, err := f.s.Replay("lose", "r")
	if err != nil {
		t.Fatal(err)
	}
	r := f.br("r")
	if got := f.read(r, "merge"); got != strings.Replace(strings.Replace(text, "1\n", "1 lose\n", 1), "8\n", "8 win\n", 1) {
		t.Errorf("merge: %q", got)
	}
	if got := f.read(r, "clash"); !strings.Contains(got, "<<<<<<< lose\n4 lose\n=======\n4 win\n>>>>>>> r\n") {
		t.Errorf("clash: %q", got)
	}
	for rel, want := range map[string]string{"bin": "\x00lose", "bin~theirs": "\x00win", "new": "added by lose",
		"gone": "ENOENT", "theirs-only": "t2", "newdir/x": "x", "dir/keep": "k"} {
		if got := f.read(r, rel); got != want {
			t.Errorf("%s: %q, want %q", rel, got, want)
		}
	}
	kinds := map[string]string{}
	for _, c := range cs {
		kinds[c.Path] = c.Kind
	}
	if len(cs) != 2 || kinds["clash"] != "text" || kinds["bin"] != "both" {
		t.Fatalf("conflicts: %+v", cs)
	}
	// Not committable until resolved; the record survives a reopen.
	f.reopen()
	if _, err := f.s.Commit("r", false); !errors.Is(err, api.ErrState) {
		t.Fatalf("commit with conflicts: %v, want ErrState", err)
	}
	f.write(f.br("r"), "clash", strings.Replace(text, "4\n", "4 both\n", 1))
	if left, _ := f.s.Conflicts("r"); len(left) != 1 || left[0].Path != "bin" {
		t.Fatalf("after resolving clash: %+v", left)
	}
	if _, err := f.s.Commit("r", false); !errors.Is(err, api.ErrState) {
		t.Fatalf("commit with bin unresolved: %v", err)
	}
	f.rm(f.br("r"), "bin~theirs")
	f.commit("r", true)
	for rel, want := range map[string]string{"clash": strings.Replace(text, "4\n", "4 both\n", 1), "bin": "\x00lose", "new": "added by lose"} {
		if got := f.baseRead(rel); got != want {
			t.Errorf("the base's %s after the commit: %q", rel, got)
		}
	}
	if _, err := os.Stat(filepath.Join(f.base, "gone")); !os.IsNotExist(err) {
		t.Errorf("gone: %v", err)
	}
	// r is gone: its record goes at the next Open.
	f.reopen()
	n := 0
	f.s.db.View(func(tx *bolt.Tx) error {
		if bk := tx.Bucket(bucketConflicts); bk != nil {
			n = bk.Stats().KeyN
		}
		return nil
	})
	if n != 0 {
		t.Errorf("%d conflict records left after r's commit and a reopen", n)
	}
}

// TestAttackReplaySymlinks: the branch a rebase replays into (the parent's
// new state) holds symlinks out of the tree where the stale branch has a
// directory, a file beneath it, and a file whose ~theirs name is taken: the
// replay writes only inside the branch (a symlink's target outside is never
// written, nor its directory entered).
func TestAttackReplaySymlinks(t *testing.T) {
	for _, withAside := range []bool{false, true} {
		outside := t.TempDir()
		victim := filepath.Join(outside, "victim")
		if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
			t.Fatal(err)
		}
		f := newFixture(t, map[string]string{"d/keep": "k", "bin": "\x00base", "e/keep": "k"})
		f.fork(Main, "win", "lose")
		w, l := f.br("win"), f.br("lose")
		symlink := func(b *Branch, rel, target string) {
			t.Helper()
			if err := f.s.Create(b, rel, false, func(dir int, name string) error { return unix.Symlinkat(target, dir, name) }); err != nil {
				t.Fatalf("symlink %s: %v", rel, err)
			}
		}
		// win: d and e become symlinks to outside, a new n too, bin
		// changes (and bin~theirs is a symlink to the victim); lose
		// writes beneath d, e and n, and bin.
		f.rm(w, "d/keep")
		f.rm(w, "d")
		symlink(w, "d", outside)
		symlink(w, "n", outside)
		f.write(w, "bin", "\x00win")
		if withAside {
			symlink(w, "bin~theirs", victim)
		}
		f.rm(w, "e/keep")
		f.rm(w, "e")
		symlink(w, "e", outside)
		f.write(l, "d/keep", "lose")
		f.write(l, "d/new", "lose")
		f.write(l, "n/victim", "lose")
		f.write(l, "bin", "\x00lose")
		f.write(l, "e/victim", "lose")
		f.commit("win", true)
		f.fork(Main, "r")
		cs, err := f.s.Replay("lose", "r")
		t.Logf("replay (bin~theirs taken: %v): %+v, %v", withAside, cs, err)
		if b, _ := os.ReadFile(victim); string(b) != "untouched" {
			t.Errorf("the victim outside the tree: %q", b)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Errorf("the replay wrote into the directory outside: %v", ents)
		}
		if err != nil {
			t.Fatalf("the replay failed instead of recording conflicts: %v", err)
		}
		{
			r := f.br("r")
			for rel, want := range map[string]string{"d/new": "lose", "n/victim": "lose", "e/victim": "lose", "bin": "\x00lose"} {
				if got := f.read(r, rel); got != want {
					t.Errorf("%s after the replay: %q, want %q", rel, got, want)
				}
			}
			aside := map[string]string{}
			for _, c := range cs {
				aside[c.Path] = c.Aside
			}
			wantBin := "bin~theirs"
			if withAside {
				wantBin = "bin~theirs.1" // bin~theirs is taken: the next free name
			}
			if aside["bin"] != wantBin || aside["d"] != "d~theirs" || aside["e"] != "e~theirs" || aside["n"] != "n~theirs" {
				t.Errorf("conflicts: %+v", cs)
			}
			if res, err := f.s.Resolve(r, "d~theirs"); err != nil {
				t.Errorf("d~theirs: %v", err)
			} else if got, err := os.Readlink(res.Real); err != nil || got != outside {
				t.Errorf("d~theirs: %q, %v: want the symlink kept as it was", got, err)
			}
		}
	}
}

// TestReplayTypeMatrix: every type change of one path (a file, a directory,
// a symlink, none) on each side replays without an error, by the rules:
// a delete loses to a change; the same kind on both sides merges (text
// line by line, directories entry by entry) or keeps theirs beside ours;
// kinds that differ keep a directory at the path (ours, or theirs with ours
// at p~ours) and otherwise ours, with theirs at p~theirs.
func TestReplayTypeMatrix(t *testing.T) {
	const (
		file = "file"
		dir  = "dir"
		link = "link"
		none = "none"
		same = "same" // as the base left it
	)
	// make gives p the kind k in b (a version of its own, tagged tag):
	// a file "tag\n", a directory with p/ktag, a symlink to tag.
	make := func(f *fixture, b *Branch, k, tag string) {
		t.Helper()
		if r, err := f.s.Resolve(b, "p"); err == nil && k != same {
			if r.IsDir() {
				for _, e := range strings.Fields(f.ls(b, "p")) {
					f.rm(b, "p/"+e)
				}
			}
			f.rm(b, "p")
		}
		switch k {
		case same:
			return
		case file:
			f.write(b, "p", tag+"\n")
		case dir:
			f.write(b, "p/k"+tag, tag)
		case link:
			if err := f.s.Create(b, "p", false, func(dir int, name string) error { return unix.Symlinkat(tag, dir, name) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	// kindOf is p's kind in b, and its version's tag.
	kindOf := func(f *fixture, b *Branch, rel string) (string, string) {
		t.Helper()
		r, err := f.s.Resolve(b, rel)
		if errors.Is(err, unix.ENOENT) {
			return none, ""
		}
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(r.Real, &st); err != nil {
			t.Fatal(err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return dir, strings.ReplaceAll(f.ls(b, rel), "k", "")
		case unix.S_IFLNK:
			tag, err := os.Readlink(r.Real)
			if err != nil {
				t.Fatal(err)
			}
			return link, tag
		}
		return file, strings.TrimSuffix(f.read(b, rel), "\n")
	}
	kinds := []string{file, dir, link, none}
	for _, base := range kinds {
		for _, ours := range append(kinds, same) {
			for _, theirs := range append(kinds, same) {
				if ours == none && theirs == none || ours == same && theirs == same || base == none && (ours == same || theirs == same) {
					continue
				}
				name := base + "/" + ours + "/" + theirs
				t.Run(name, func(t *testing.T) {
					f := newFixture(t, map[string]string{"other": "x"})
					f.fork(Main, "b0")
					make(f, f.br("b0"), base, "b")
					f.commit("b0", true)
					f.fork(Main, "win", "lose")
					make(f, f.br("win"), theirs, "t")
					make(f, f.br("lose"), ours, "o")
					f.commit("win", true)
					f.fork(Main, "r")
					cs, err := f.s.Replay("lose", "r")
					if err != nil {
						t.Fatalf("replay: %v (conflicts %+v)", err, cs)
					}
					r := f.br("r")
					// want: p's kind and tag, and the aside's.
					wantK, wantTag, aside, asideK, asideTag, kind := "", "", "", "", "", ""
					switch {
					case ours == same:
						wantK, wantTag = theirs, "t"
					case theirs == same:
						wantK, wantTag = ours, "o"
					case ours == none:
						wantK, wantTag = theirs, "t"
					case theirs == none:
						wantK, wantTag = ours, "o"
					case ours == dir && theirs == dir:
						wantK, wantTag = dir, "o t"
					case ours == file && theirs == file && base != dir && base != link:
						wantK, kind = file, "text"
					case ours == theirs:
						wantK, wantTag, aside, asideK, asideTag, kind = ours, "o", "p~theirs", theirs, "t", "both"
					case theirs == dir:
						wantK, wantTag, aside, asideK, asideTag, kind = dir, "t", "p~ours", ours, "o", "type"
					default:
						wantK, wantTag, aside, asideK, asideTag, kind = ours, "o", "p~theirs", theirs, "t", "type"
					}
					if wantK == none {
						wantTag = ""
					}
					gotK, gotTag := kindOf(f, r, "p")
					if kind == "text" {
						if got := f.read(r, "p"); gotK != file || !strings.Contains(got, "<<<<<<< lose\no\n=======\nt\n>>>>>>> r\n") {
							t.Errorf("p: %s %q, want the lines of both, marked", gotK, got)
						}
					} else if gotK != wantK || gotTag != wantTag {
						t.Errorf("p: %s %q, want %s %q", gotK, gotTag, wantK, wantTag)
					}
					if aside != "" {
						if k, tag := kindOf(f, r, aside); k != asideK || tag != asideTag {
							t.Errorf("%s: %s %q, want %s %q", aside, k, tag, asideK, asideTag)
						}
					}
					var got []Conflict
					for _, c := range cs {
						if c.Path == "p" {
							got = append(got, c)
						}
					}
					switch {
					case kind == "" && len(cs) > 0:
						t.Errorf("conflicts %+v, want none", cs)
					case kind != "" && (len(got) != 1 || got[0].Kind != kind || got[0].Aside != aside):
						t.Errorf("conflicts %+v, want p %s aside %q", cs, kind, aside)
					}
					if f.read(r, "other") != "x" {
						t.Errorf("other: %q", f.read(r, "other"))
					}
				})
			}
		}
	}
}

// TestReplayAsideTaken: PATH~theirs taken on the replayed branch's side
// (and PATH~theirs.1 on the target's): theirs goes to the next free name,
// and the branch's own PATH~theirs is replayed as any new file; the aside
// of a name of NAME_MAX bytes is cut to fit.
func TestReplayAsideTaken(t *testing.T) {
	long := strings.Repeat("n", 255) // NAME_MAX: its aside is cut to fit
	f := newFixture(t, map[string]string{"bin": "\x00base", long: "\x00base"})
	f.fork(Main, "win", "lose")
	w, l := f.br("win"), f.br("lose")
	f.write(w, long, "\x00win")
	f.write(l, long, "\x00lose")
	f.write(w, "bin", "\x00win")
	f.write(w, "bin~theirs.1", "win's own")
	f.write(l, "bin", "\x00lose")
	f.write(l, "bin~theirs", "lose's own")
	f.commit("win", true)
	f.fork(Main, "r")
	cs, err := f.s.Replay("lose", "r")
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	longAside := long[:255-len("~theirs")] + "~theirs"
	if len(cs) != 2 || cs[0].Path != "bin" || cs[0].Aside != "bin~theirs.2" || cs[1].Path != long || cs[1].Aside != longAside {
		t.Fatalf("conflicts: %+v, want bin aside bin~theirs.2, and %s", cs, longAside)
	}
	r := f.br("r")
	if got := f.read(r, longAside); got != "\x00win" {
		t.Errorf("%s: %q", longAside, got)
	}
	for rel, want := range map[string]string{"bin": "\x00lose", "bin~theirs": "lose's own", "bin~theirs.1": "win's own", "bin~theirs.2": "\x00win"} {
		if got := f.read(r, rel); got != want {
			t.Errorf("%s: %q, want %q", rel, got, want)
		}
	}
}
