package cowfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/internal/testenv"
)

// names lists dir by readdir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestControlFileNotListed: .branchfs_ctl answers by name at the root and
// at /@NAME/, but no listing shows it, so git status and git add -A in a
// mount never take it for a file of the project.
func TestControlFileNotListed(t *testing.T) {
	f, _, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "a"), []byte("base"), 0o644) })
	if err := f.Create("x", "main", 0); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{mnt, filepath.Join(mnt, "@x"), filepath.Join(mnt, "@main")} {
		if ns := names(t, dir); slices.Contains(ns, ctlName) || !slices.Contains(ns, "a") {
			t.Errorf("listing of %s: %v; want a, without %s", dir, ns, ctlName)
		}
		if _, err := os.Stat(filepath.Join(dir, ctlName)); err != nil {
			t.Errorf("%s by name in %s: %v", ctlName, dir, err)
		}
	}
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git", "git status in a mount")
		return
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", mnt, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q")
	git("add", "-A")
	if out := git("status", "--porcelain", "--ignored"); strings.Contains(out, ctlName) {
		t.Errorf("git status in the mount shows the control file:\n%s", out)
	}
	if out := git("ls-files", "--cached"); strings.Contains(out, ctlName) {
		t.Errorf("git add -A in the mount took the control file:\n%s", out)
	}
}

// TestHideControl: with NoControl no control file answers at all.
func TestHideControl(t *testing.T) {
	st := newStore(t, nil)
	if err := st.Fork("main", "x"); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	f, err := Mount(Config{Store: st, Mountpoint: mnt, NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Unmount(true) })
	for _, dir := range []string{mnt, filepath.Join(mnt, "@x")} {
		if _, err := os.Stat(filepath.Join(dir, ctlName)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s in %s with NoControl: %v, want ENOENT", ctlName, dir, err)
		}
		if err := os.WriteFile(filepath.Join(dir, ctlName), []byte("commit"), 0o644); err == nil {
			t.Errorf("a write to %s in %s with NoControl succeeded", ctlName, dir)
		}
	}
	if _, err := st.Branch("x"); err != nil {
		t.Errorf("branch x after the refused writes: %v", err)
	}
}
