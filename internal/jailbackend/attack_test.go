package jailbackend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAttackTmp: a sandbox plants in its /tmp symlinks out of it (to the
// host's /etc, its root, up the layer's own directories, to the other
// nodes' /tmp under the mount) and a FIFO, and tries to reach
// a sibling's /tmp and the layer's mount. A sibling's /tmp stays unseen,
// and the fork, commit (CommitOver), reopen and disk accounting that
// follow, all the daemon's, follow none of the symlinks: nothing outside
// the node's /tmp changes.
func TestAttackTmp(t *testing.T) {
	f := newFixture(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.b.Start(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Dir(f.tmpPath("n1"))
	f.sh("n1", "echo secret1 > /tmp/secret; ln -s "+victim+" /tmp/v; ln -s "+outside+" /tmp/out; ln -s / /tmp/root; "+
		"ln -s ../../../../../../ /tmp/up; ln -s "+mnt+" /tmp/mnt; ln -s "+filepath.Join(mnt, "@n2")+" /tmp/n2; mkfifo /tmp/fifo")
	f.fork("n1", "n2", "n3")
	f.sh("n2", "echo secret2 > /tmp/only2; echo child > /tmp/v2; rm /tmp/v; ln -s "+victim+" /tmp/v; echo into > /tmp/out/new 2>/dev/null || true")
	// n3 reaches n2's /tmp by no path inside its sandbox.
	if got := f.sh("n3", "cat /tmp/n2/only2 /tmp/mnt/@n2/only2 /tmp/../tmp/only2 /tmp/up/only2 2>/dev/null; ls /tmp/mnt 2>/dev/null; true"); strings.Contains(got, "secret2") || strings.Contains(got, "@n2") {
		t.Errorf("n3 reads n2's /tmp or the layer's mount: %q", got)
	}
	// n3 writes nothing of the host through the symlinks.
	if got := f.sh("n3", "echo x > /tmp/v 2>/dev/null; echo y > /tmp/out/new 2>/dev/null; echo done"); got != "done\n" {
		t.Errorf("n3: %q", got)
	}
	if err := f.b.Commit(f.ctx, "n2", "n1"); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	for node, m := range f.b.(*backend).tmp.usage() {
		t.Logf("/tmp of %s holds %d bytes", node, m)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Errorf("the victim outside: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("the directory outside: %v", ents)
	}
	n1 := f.tmpPath("n1")
	if b, _ := os.ReadFile(filepath.Join(n1, "only2")); string(b) != "secret2\n" {
		t.Errorf("n1's /tmp after the commit has only2 %q", b)
	}
	if l, _ := os.Readlink(filepath.Join(n1, "v")); l != victim {
		t.Errorf("n1's /tmp after the commit has v -> %q", l)
	}
}
