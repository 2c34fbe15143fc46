package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// layerBytes is what every layer of tree id allocates on disk, measured
// independently of the daemon: du of its store's layers directory.
func layerBytes(t *testing.T, home, id string) int64 {
	t.Helper()
	var n int64
	root := filepath.Join(home, "trees", id, "store", "layers")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDiskBudget is issue 16's scenario through a real daemon: tree create
// with a disk budget of 1,000,000 bytes, fork, write 5 MiB in the child,
// fork again. The write fails with ENOSPC and leaves the file whole, the
// usage counts what the child's layer holds, the second fork is refused
// with the arithmetic, and after a SIGKILL and a restart the figures are
// the same.
func TestDiskBudget(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	for _, d := range []string{home, base} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(base, "seed.txt"), "seed")
	sock := filepath.Join(home, "arbord.sock")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p := spawn(t, home, dir)
	cl := client.New(sock)
	defer func() { cl.Close() }()
	must := func(req api.Request) api.Response {
		t.Helper()
		r, err := cl.Do(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Op, err)
		}
		return r
	}
	const budget = 1_000_000
	must(api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "disk", Budget: &api.Budget{MaxDiskBytes: budget}})
	child := must(api.Request{Op: api.OpTreeFork, TreeID: "disk", SourceID: "n1", Label: "child"})

	// 5 MiB in one write: nothing of it fits.
	big := bytes.Repeat([]byte("x"), 5<<20)
	if err := os.WriteFile(filepath.Join(child.Path, "big"), big, 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write of 5 MiB under a budget of %d bytes: %v, want ENOSPC", budget, err)
	}
	// 5 MiB in 4 KiB writes to a file that holds something: the writes
	// fit until the budget is reached, the first that does not fails, and
	// the file holds exactly what was written before it.
	keep := filepath.Join(child.Path, "keep")
	head := bytes.Repeat([]byte("k"), 10_000)
	writeFile(t, keep, string(head))
	f, err := os.OpenFile(keep, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("c"), 4096)
	written := 0
	for written < len(big) {
		n, err := f.Write(chunk)
		written += n
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write at %d: %v, want ENOSPC", written, err)
			}
			break
		}
	}
	f.Close()
	if written == 0 || written >= len(big) {
		t.Fatalf("wrote %d bytes of 5 MiB under a budget of %d", written, budget)
	}
	got, err := os.ReadFile(keep)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte(nil), head...), bytes.Repeat([]byte("c"), written)...); !bytes.Equal(got, want) {
		t.Fatalf("keep holds %d bytes, want the %d written before ENOSPC", len(got), len(want))
	}
	if b, err := os.ReadFile(filepath.Join(child.Path, "big")); err != nil || len(b) != 0 {
		t.Fatalf("big after its refused write: %d bytes, %v; want it empty", len(b), err)
	}

	// The usage is what the layers hold (within a second), near the budget.
	var used int64
	deadline := time.Now().Add(3 * time.Second)
	for {
		r := must(api.Request{Op: api.OpTreeNodes, TreeID: "disk"})
		used = r.Usage.DiskBytes
		du := layerBytes(t, home, "disk")
		if used == du && used > budget-2*4096 && used <= budget {
			var nodeSum int64
			for _, n := range r.Nodes {
				nodeSum += n.DiskBytes
			}
			if nodeSum != used {
				t.Fatalf("nodes hold %d bytes, the tree %d", nodeSum, used)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tree usage %d bytes, du of its layers %d, budget %d", used, du, budget)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The second fork cannot fit.
	refused := func(when string) {
		t.Helper()
		_, err := cl.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: "disk", SourceID: child.NodeID, Label: "again"})
		if !errors.Is(err, api.ErrBudget) || !strings.Contains(err.Error(), "disk ") || !strings.Contains(err.Error(), "> max 1000000 bytes") {
			t.Fatalf("%s: fork of a full tree: %v, want a disk budget error with the arithmetic", when, err)
		}
	}
	refused("before the crash")

	// A SIGKILL and a restart: the figures are recomputed from the layers.
	p.kill(t)
	cl.Close()
	p = spawn(t, home, dir)
	cl = client.New(sock)
	r := must(api.Request{Op: api.OpTreeNodes, TreeID: "disk"})
	if r.Usage.DiskBytes != used || r.Budget.MaxDiskBytes != budget {
		t.Fatalf("after a restart: disk %d/%d, want %d/%d", r.Usage.DiskBytes, r.Budget.MaxDiskBytes, used, budget)
	}
	refused("after the restart")
	if err := os.WriteFile(filepath.Join(child.Path, "more"), chunk, 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write into the full tree after the restart: %v, want ENOSPC", err)
	}
	// Aborting the child frees its bytes; a fork fits again.
	must(api.Request{Op: api.OpTreeAbort, TreeID: "disk", NodeID: child.NodeID})
	if r := must(api.Request{Op: api.OpTreeNodes, TreeID: "disk"}); r.Usage.DiskBytes != 0 {
		t.Fatalf("after the abort the tree holds %d bytes", r.Usage.DiskBytes)
	}
	must(api.Request{Op: api.OpTreeFork, TreeID: "disk", SourceID: "n1", Label: "after"})
}

// metricValue reads one sample of /metrics.
func metricValue(t *testing.T, addr, sample string) (float64, bool) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestDiskMetrics: a writer with room under the budget writes by
// passthrough, unseen by the daemon, and tree_nodes and /metrics still show
// its bytes within a second, while it holds the file open.
func TestDiskMetrics(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	writeFile(t, filepath.Join(base, "a.txt"), "a")
	addr := freeAddr(t)
	startDaemon(t, Config{Home: home, HTTPAddr: addr, Token: testToken})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx := t.Context()
	if _, err := cl.Do(ctx, api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "m", Budget: &api.Budget{MaxDiskBytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	child, err := cl.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: "m", SourceID: "n1", Label: "w"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.Create(filepath.Join(child.Path, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		r, err := cl.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: "m"})
		if err != nil {
			t.Fatal(err)
		}
		m, ok := metricValue(t, addr, `arbor_tree_usage_bytes{kind="disk",tree="m"}`)
		if r.Usage.DiskBytes >= 4<<20 && ok && m >= 4<<20 {
			break
		}
		if time.Since(start) > 1500*time.Millisecond {
			t.Fatalf("%v after a 4 MiB write: tree_nodes disk %d, /metrics %v (%v)", time.Since(start), r.Usage.DiskBytes, m, ok)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if b, ok := metricValue(t, addr, `arbor_tree_budget_bytes{kind="disk",tree="m"}`); !ok || b != 1<<30 {
		t.Fatalf("/metrics disk budget %v (%v)", b, ok)
	}
}
