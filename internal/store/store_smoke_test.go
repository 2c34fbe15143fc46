package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

func mustWrite(t *testing.T, s *Store, b *Branch, rel, data string) {
	t.Helper()
	if _, err := s.Resolve(b, rel); err == nil {
		p, err := s.CopyUp(b, rel)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := s.Create(b, rel, false, byPath(func(real string) error { return os.WriteFile(real, []byte(data), 0o644) })); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, s *Store, b *Branch, rel string) string {
	t.Helper()
	r, err := s.Resolve(b, rel)
	if err != nil {
		return "ENOENT"
	}
	d, err := os.ReadFile(r.Real)
	if err != nil {
		t.Fatal(err)
	}
	return string(d)
}

func TestSmoke(t *testing.T) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "a"), []byte("base"), 0o644)
	s, err := Open(Config{Dir: t.TempDir(), Base: base})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Fork(Main, "x", "y"); err != nil {
		t.Fatal(err)
	}
	m, _ := s.Branch(Main)
	x, _ := s.Branch("x")
	y, _ := s.Branch("y")
	mustWrite(t, s, x, "a", "x")
	mustWrite(t, s, m, "a", "main")
	if got := read(t, s, y, "a"); got != "base" {
		t.Fatalf("y sees %q", got)
	}
	if got := read(t, s, x, "a"); got != "x" {
		t.Fatalf("x sees %q", got)
	}
	if _, err := s.Commit("x", true); !errors.Is(err, api.ErrStale) {
		t.Fatalf("commit after main changed: %v", err)
	}
	s.Abort("x")
	s.Abort("y")
	s.Fork(Main, "z", "w")
	z, _ := s.Branch("z")
	mustWrite(t, s, z, "b", "new")
	if err := s.Remove(z, "a", false); err != nil {
		t.Fatal(err)
	}
	if err := s.Fork("z", "z1"); err != nil {
		t.Fatal(err)
	}
	z1, _ := s.Branch("z1")
	mustWrite(t, s, z1, "c", "c")
	if _, err := s.Commit("z1", false); err != nil {
		t.Fatal(err)
	}
	res, err := s.Commit("z", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stale) != 1 || res.Stale[0] != "w" {
		t.Fatalf("stale %v", res.Stale)
	}
	for f, want := range map[string]string{"a": "ENOENT", "b": "new", "c": "c"} {
		d, err := os.ReadFile(filepath.Join(base, f))
		got := string(d)
		if err != nil {
			got = "ENOENT"
		}
		if got != want {
			t.Errorf("base %s = %q, want %q", f, got, want)
		}
	}
}
