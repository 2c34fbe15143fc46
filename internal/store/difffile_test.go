package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
)

func TestDiffFile(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("outside\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, map[string]string{"mod": "old\n", "gone": "bye\n", "big": "x", "same": "s\n", "d/": ""})
	f.fork(Main, "b")
	b := f.br("b")
	f.write(b, "mod", "new\n")
	f.write(b, "d/add", "hello\n")
	f.rm(b, "gone")
	f.write(b, "big", strings.Repeat("y", 100))
	if err := f.s.Create(b, "link", false, func(dir int, name string) error {
		return unix.Symlinkat(secret, dir, name)
	}); err != nil {
		t.Fatal(err)
	}
	f.write(b, "mod", "newer\n") // a second write in the same layer

	for _, c := range []struct {
		path                string
		then, now           string // "-": absent; "@": present, no data
		thenRegular, nowReg bool
		nowSize             int64
	}{
		{"mod", "old\n", "newer\n", true, true, 6},
		{"d/add", "-", "hello\n", false, true, 6},
		{"gone", "bye\n", "-", true, false, 0},
		{"big", "x", "@", true, true, 100},  // over the cap: its size, no data
		{"link", "-", "@", false, false, 0}, // a symlink: present, never followed
		{"same", "s\n", "s\n", true, true, 2},
	} {
		then, now, err := f.s.DiffFile("b", c.path, 64)
		if err != nil {
			t.Fatalf("DiffFile %s: %v", c.path, err)
		}
		check := func(side string, v Version, want string, regular bool) {
			t.Helper()
			switch want {
			case "-":
				if v.Exists {
					t.Errorf("%s %s: exists, want absent (%+v)", c.path, side, v)
				}
			case "@":
				if !v.Exists || v.Data != nil {
					t.Errorf("%s %s: %+v, want present without data", c.path, side, v)
				}
			default:
				if !v.Exists || string(v.Data) != want {
					t.Errorf("%s %s: %q (%+v), want %q", c.path, side, v.Data, v, want)
				}
			}
			if v.Regular != regular {
				t.Errorf("%s %s: regular %v, want %v", c.path, side, v.Regular, regular)
			}
		}
		check("then", then, c.then, c.thenRegular)
		check("now", now, c.now, c.nowReg)
		if now.Size != c.nowSize {
			t.Errorf("%s now: size %d, want %d", c.path, now.Size, c.nowSize)
		}
	}
	if then, now, err := f.s.DiffFile("b", "link", 1<<20); err != nil || strings.Contains(string(now.Data), "outside") || now.Regular || then.Exists {
		t.Errorf("the symlink was followed: %+v %+v %v", then, now, err)
	}
	// The root of a directory: present on both sides, no data.
	if then, now, err := f.s.DiffFile("b", "d", 64); err != nil || !then.Exists || !now.Exists || then.Regular || now.Regular {
		t.Errorf("dir: %+v %+v %v", then, now, err)
	}
	for _, c := range []struct {
		branch, path string
		want         error
	}{
		{"b", "../x", api.ErrBadRequest},
		{"b", "/mod", api.ErrBadRequest},
		{"b", "", api.ErrBadRequest},
		{"b", "d/../mod", api.ErrBadRequest},
		{Main, "mod", api.ErrBadRequest},
		{"nope", "mod", api.ErrNotFound},
	} {
		if _, _, err := f.s.DiffFile(c.branch, c.path, 64); !errors.Is(err, c.want) {
			t.Errorf("DiffFile %s %q: %v, want %v", c.branch, c.path, err, c.want)
		}
	}
	// A sibling's commit makes b stale: its work can still be diffed.
	_, live, err := f.s.DiffFile("b", "mod", 64)
	if err != nil {
		t.Fatal(err)
	}
	f.fork(Main, "c")
	f.write(f.br("c"), "new-in-c", "c\n")
	f.commit("c", false)
	if _, now, err := f.s.DiffFile("b", "mod", 64); err != nil || string(now.Data) != string(live.Data) {
		t.Errorf("a stale branch's diff: %q, %v; want its own %q", now.Data, err, live.Data)
	}
}
