package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// TestAbortDuringWrites: writers keep writing in a branch while it is
// aborted: nothing panics, every failure is ESTALE or a vanished path, and
// nothing reaches the parent or leaves a layer behind.
func TestAbortDuringWrites(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "p")
	f.write(f.br("p"), "pfile", "p")
	f.fork("p", "c", "sib")
	c := f.br("c")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var oks, fails int
	deadline := time.Now().Add(3 * time.Second)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				var err error
				switch i % 4 {
				case 0:
					err = writeErr(f.s, c, fmt.Sprintf("w%d/f%d", g, i), "leak")
				case 1:
					err = writeErr(f.s, c, "a", "leak")
				case 2:
					err = f.s.Rename(c, "b", fmt.Sprintf("b%d-%d", g, i), 0)
					if err == nil {
						err = f.s.Rename(c, fmt.Sprintf("b%d-%d", g, i), "b", 0)
					}
				case 3:
					_, err = f.s.ReadDir(c, "")
				}
				mu.Lock()
				if err == nil {
					oks++
				} else {
					fails++
				}
				mu.Unlock()
				if err != nil {
					if !errors.Is(err, syscall.ESTALE) && !errors.Is(err, os.ErrNotExist) {
						t.Errorf("writer %d: %v, want ESTALE or ENOENT after the abort", g, err)
					}
					return
				}
			}
			t.Errorf("writer %d never saw the abort", g)
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := f.s.Abort("c"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("%d operations succeeded before the abort, %d failed after", oks, fails)
	if oks == 0 {
		t.Errorf("no write happened before the abort")
	}
	p := f.br("p")
	if got := f.ls(p, ""); got != "a b d/ empty/ keep other/ pfile" {
		t.Errorf("parent lists %q", got)
	}
	if got := f.read(p, "a"); got != "a0" {
		t.Errorf("parent reads a = %q", got)
	}
	if got := f.read(f.br("sib"), "a"); got != "a0" {
		t.Errorf("sibling reads a = %q", got)
	}
	goneOps(t, f.s, c)
	f.reopen()
	for _, d := range f.layerDirs() {
		if d == fmt.Sprint(c.head().id) {
			t.Errorf("the aborted head's layer %s is still on disk", d)
		}
	}
	if got := f.ls(f.br("p"), ""); got != "a b d/ empty/ keep other/ pfile" {
		t.Errorf("after reopen the parent lists %q", got)
	}
}

// TestAbortFastAndReclaimed: Abort does not wait for the layers' removal;
// they are gone once the store is closed, and so is trash left by a crash.
func TestAbortFastAndReclaimed(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "a0"})
	f.fork(Main, "big")
	big := f.br("big")
	const files = 1000
	for i := range files {
		if err := f.s.Create(big, fmt.Sprintf("f%d", i), false, byPath(func(real string) error {
			return os.WriteFile(real, []byte("x"), 0o644)
		})); err != nil {
			t.Fatal(err)
		}
	}
	f.fork("big", "kid")
	f.write(f.br("kid"), "k", "k")
	headDir := big.head().dir
	start := time.Now()
	if err := f.s.Abort("big"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("abort of a branch of %d files took %v", files, took)
	if took > 500*time.Millisecond {
		t.Errorf("abort took %v", took)
	}
	if _, err := os.Lstat(headDir); !os.IsNotExist(err) {
		t.Errorf("the layer is still in place after Abort returned: %v", err)
	}
	if _, err := f.s.Branch("kid"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("abort kept the child: %v", err)
	}
	f.reopen()
	if d := f.layerDirs(); len(d) != 0 {
		t.Errorf("layer dirs left after the abort: %v", d)
	}
	if ents, _ := os.ReadDir(filepath.Join(f.dir, "trash")); len(ents) != 0 {
		t.Errorf("trash left: %d entries", len(ents))
	}

	// Trash and unreferenced layers left by a crash are reclaimed at Open.
	f.s.Close()
	f.s = nil
	for _, p := range []string{"trash/77/x/y", "trash/78", "layers/999/z", "layers/notanumber/q"} {
		if err := os.MkdirAll(filepath.Join(f.dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(f.dir, p, "file"), []byte("junk"), 0o644)
	}
	os.Chmod(filepath.Join(f.dir, "trash/77/x"), 0o500) // a directory left without write permission
	f.open()
	f.reopen()
	if d := f.layerDirs(); len(d) != 0 {
		t.Errorf("layer dirs not reclaimed at Open: %v", d)
	}
	if ents, _ := os.ReadDir(filepath.Join(f.dir, "trash")); len(ents) != 0 {
		t.Errorf("trash not reclaimed at Open: %d entries", len(ents))
	}
}

// TestGoneHandles: a Branch handle kept past its abort or its commit fails
// with ESTALE and writes nowhere.
func TestGoneHandles(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "p")
	f.fork("p", "aborted", "committed")
	ab, cm := f.br("aborted"), f.br("committed")
	f.write(cm, "c", "c")
	if err := f.s.Abort("aborted"); err != nil {
		t.Fatal(err)
	}
	f.commit("committed", false)
	for _, b := range []*Branch{ab, cm} {
		goneOps(t, f.s, b)
		if err := writeErr(f.s, b, "late", "late"); !errors.Is(err, syscall.ESTALE) {
			t.Errorf("write through the %s handle: %v", b.Name, err)
		}
	}
	p := f.br("p")
	if got := f.read(p, "c"); got != "c" {
		t.Errorf("parent lost the commit: %q", got)
	}
	if got := f.read(p, "late"); got != "ENOENT" {
		t.Errorf("a gone handle wrote into the parent: %q", got)
	}
	f.reopen()
	if d := f.layerDirs(); len(d) != 1 {
		t.Errorf("layer dirs %v, want only p's head", d)
	}
}

// TestPersistence: branches, contents, relations, quotas and stale flags
// survive Close and Open; fork and commit work after it.
func TestPersistence(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "p", "q")
	p := f.br("p")
	f.write(p, "a", "pa")
	f.rm(p, "b")
	f.rename(p, "d", "d2")
	if err := f.s.SetQuota("p", 1<<20); err != nil {
		t.Fatal(err)
	}
	f.fork("p", "x", "y", "z")
	f.write(f.br("x"), "x", "x")
	f.mkdir(f.br("y"), "ydir")
	f.write(f.br("y"), "ydir/f", "y")
	f.write(f.br("z"), "z", "z")
	f.fork("z", "z1")
	f.fork("q", "q1")
	f.commit("q1", false) // q1 gone; q unchanged otherwise
	f.fork("q", "q2", "q3")
	f.write(f.br("q2"), "q2", "q2")
	f.commit("q2", false) // q3 stale

	infos := func() string {
		var out []string
		for _, bi := range f.s.Branches() {
			out = append(out, fmt.Sprintf("%s<%s stale=%v depth=%d quota=%d", bi.Name, bi.Parent, bi.Stale, bi.Depth, bi.Quota))
		}
		return strings.Join(out, "; ")
	}
	contents := func() string {
		var out []string
		for _, bi := range f.s.Branches() {
			b := f.br(bi.Name)
			if f.s.IsStale(b) {
				continue
			}
			out = append(out, bi.Name+": "+f.ls(b, "")+" | "+f.ls(b, "d2")+" | a="+f.read(b, "a")+" y="+f.read(b, "ydir/f")+" q2="+f.read(b, "q2"))
		}
		return strings.Join(out, "\n")
	}
	before, beforeC := infos(), contents()
	f.reopen()
	if got := infos(); got != before {
		t.Errorf("branches after reopen:\n%s\nwant\n%s", got, before)
	}
	if got := contents(); got != beforeC {
		t.Errorf("contents after reopen:\n%s\nwant\n%s", got, beforeC)
	}
	if !f.s.IsStale(f.br("q3")) {
		t.Errorf("q3 is not stale after reopen")
	}
	if got := f.s.Subtree("z"); strings.Join(got, ",") != "z,z1" {
		t.Errorf("subtree of z after reopen: %v", got)
	}
	// Fork after reopen: the new child sees its parent, writes stay its own.
	f.fork("p", "n")
	n := f.br("n")
	if got := f.read(n, "d2/x"); got != "x0" {
		t.Errorf("a fork after reopen reads d2/x = %q", got)
	}
	f.write(n, "a", "na")
	if got := f.read(f.br("p"), "a"); got != "pa" {
		t.Errorf("p reads a = %q after its new child wrote", got)
	}
	f.reopen()
	// Commit after reopen: y into p, p into main.
	if err := f.s.Abort("n"); err != nil {
		t.Fatal(err)
	}
	res := f.commit("y", false)
	if strings.Join(res.Stale, ",") != "x,z,z1" {
		t.Errorf("stale after committing y: %v", res.Stale)
	}
	// Commit is leaf-only: p's stale children are aborted first.
	if _, err := f.s.Commit("p", true); !errors.Is(err, api.ErrState) {
		t.Errorf("commit of p with children x, z: %v, want ErrState", err)
	}
	for _, n := range []string{"x", "z"} {
		if err := f.s.Abort(n); err != nil {
			t.Fatal(err)
		}
	}
	f.commit("p", true)
	for path, want := range map[string]string{"a": "pa", "b": "ENOENT", "d": "ENOENT", "d2/x": "x0", "d2/e/y": "y0", "ydir/f": "y", "x": "ENOENT"} {
		if got := f.baseRead(path); got != want {
			t.Errorf("base %s = %q, want %q", path, got, want)
		}
	}
}

// TestQuota: a copy-up or a growth past the quota fails with ENOSPC and
// changes nothing.
func TestQuota(t *testing.T) {
	f := newFixture(t, map[string]string{"small": strings.Repeat("s", 100), "big": strings.Repeat("b", 5000)})
	f.fork(Main, "c")
	if err := f.s.SetQuota("c", 1000); err != nil {
		t.Fatal(err)
	}
	c := f.br("c")
	if _, err := f.s.CopyUp(c, "big"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("copy-up of 5000 bytes under a quota of 1000: %v, want ENOSPC", err)
	}
	if r, err := f.s.Resolve(c, "big"); err != nil || r.Depth != 0 {
		t.Errorf("after the refused copy-up big resolves to %+v, %v: want the base", r, err)
	}
	if got := f.s.DiskBytes("c"); got != 0 {
		t.Errorf("disk bytes %d after a refused copy-up", got)
	}
	if _, err := f.s.CopyUp(c, "small"); err != nil {
		t.Fatal(err)
	}
	if got := f.s.DiskBytes("c"); got != 100 {
		t.Errorf("disk bytes %d, want 100", got)
	}
	if err := f.s.Grow(c, 901); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("grow past the quota: %v, want ENOSPC", err)
	}
	if got := f.s.DiskBytes("c"); got != 100 {
		t.Errorf("disk bytes %d after a refused grow, want 100", got)
	}
	if err := f.s.Grow(c, 900); err != nil {
		t.Errorf("grow to the quota: %v", err)
	}
	if err := f.s.Grow(c, 1); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("grow one past a full quota: %v, want ENOSPC", err)
	}
	// A child inherits the quota; main has none.
	f.fork("c", "cc")
	if q := f.br("cc").Quota; q != 1000 {
		t.Errorf("child quota %d, want 1000", q)
	}
	if _, err := f.s.CopyUp(f.br("cc"), "big"); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("child copy-up past the quota: %v", err)
	}
	if err := f.s.Grow(f.br(Main), 1<<40); err != nil {
		t.Errorf("main grow: %v", err)
	}
	if err := f.s.SetQuota(Main, 10); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("quota on main: %v", err)
	}
}
