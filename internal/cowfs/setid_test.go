package cowfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// asNobody runs a shell command as uid and gid 65534 with no capabilities
// (no CAP_FSETID), with $1 set to arg.
func asNobody(t *testing.T, script, arg string) {
	t.Helper()
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "sh", "-c", script, "sh", arg).CombinedOutput()
	if err != nil {
		t.Fatalf("as uid 65534: %s: %v\n%s", script, err, out)
	}
}

// realMode is the permission bits of the real file behind rel in branch.
func realMode(t *testing.T, f *FS, branch, rel string) uint32 {
	t.Helper()
	b, err := f.st.Branch(branch)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if _, err := f.st.ResolveStat(b, rel, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 07777
}

// TestSetidNotClearedAtOpen: as root (passthrough), a writer without
// CAP_FSETID clears setuid and setgid at its first write, as Linux does, and
// an open for writing alone clears nothing; checked on the real files (the
// base for main, the branch's copy-up), which no kernel cache hides. The
// writer of such a file is served by the daemon, which sees its writes.
func TestSetidNotClearedAtOpen(t *testing.T) {
	testenv.NeedRoot(t, "setuid files written by uid 65534")
	testenv.NeedCommand(t, testenv.Root, "setpriv")
	f, _, mnt := mount(t, func(b string) {
		for _, n := range []string{"f", "g"} {
			os.WriteFile(filepath.Join(b, n), []byte("base"), 0o777)
			unix.Chmod(filepath.Join(b, n), 0o6777)
		}
	})
	if !f.Passthrough() {
		t.Fatal("passthrough is off as root")
	}
	for p := mnt; p != "/"; p = filepath.Dir(p) {
		if p == os.TempDir() {
			break
		}
		os.Chmod(p, 0o755)
	}
	if err := f.Create("b", "main", 0); err != nil {
		t.Fatal(err)
	}
	f.Switch("main")
	for _, c := range []struct{ branch, path, rel string }{
		{"main", filepath.Join(mnt, "f"), "f"},
		{"b", filepath.Join(mnt, "@b", "g"), "g"},
	} {
		asNobody(t, `: >> "$1"`, c.path) // an open for writing, no write
		if m := realMode(t, f, c.branch, c.rel); m != 0o6777 {
			t.Errorf("%s: mode %#o after an open for writing by uid 65534, want 06777 (cleared at a write, not at the open)", c.path, m)
		}
		asNobody(t, `printf x >> "$1"`, c.path)
		if m := realMode(t, f, c.branch, c.rel); m != 0o777 {
			t.Errorf("%s: mode %#o after a write by uid 65534, want 0777", c.path, m)
		}
	}
}
