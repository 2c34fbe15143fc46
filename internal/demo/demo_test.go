package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/arbor-dev/arbor/internal/testenv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
)

// The real client is the Doer that `arbor demo coding-agent` passes.
var _ Doer = (*client.Client)(nil)

// fakeDaemon is a test double of arbord's tree verbs on the dir backend: a
// node's files are a real directory, a fork copies it (mode and mtimes kept,
// as a copy-on-write branch shows them), and a commit replaces the parent's
// files with the child's, first commit wins.
type fakeDaemon struct {
	dir string // where the children's directories are made

	// Hooks for the failure tests.
	failOp  string                           // this op answers with an error
	failErr error                            // ... this one
	onFork  func(label, path string)         // called after a child is made
	onReply func(op string, r *api.Response) // may edit a reply

	mu     sync.Mutex // guards everything below
	tree   string
	nodes  map[string]*fakeNode
	nextID int
	ops    []string
}

type fakeNode struct {
	id, parent, label, state, path string
	children                       []string
	version                        int // bumped by every commit into the node
	forkedAt                       int // the parent's version when forked
}

func newFake(t *testing.T) *fakeDaemon {
	return &fakeDaemon{dir: t.TempDir(), nodes: map[string]*fakeNode{}}
}

func (f *fakeDaemon) Do(ctx context.Context, req api.Request) (api.Response, error) {
	if err := ctx.Err(); err != nil {
		return api.Response{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, req.Op)
	if req.Op == f.failOp {
		return api.Response{}, f.failErr
	}
	resp, err := f.do(req)
	if err == nil && f.onReply != nil {
		f.onReply(req.Op, &resp)
	}
	return resp, err
}

func (f *fakeDaemon) do(req api.Request) (api.Response, error) {
	if req.Op != api.OpTreeCreate && (f.tree == "" || req.TreeID != f.tree) {
		return api.Response{}, api.Errorf(api.ErrNotFound, "tree %q", req.TreeID)
	}
	switch req.Op {
	case api.OpTreeCreate:
		if f.tree != "" {
			return api.Response{}, api.Errorf(api.ErrExists, "one tree per fake")
		}
		if req.Backend != "dir" || !filepath.IsAbs(req.Base) {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "backend %q base %q", req.Backend, req.Base)
		}
		if fi, err := os.Stat(req.Base); err != nil || !fi.IsDir() {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "base %q is not a directory", req.Base)
		}
		f.tree = "tree-1"
		f.nodes["n0"] = &fakeNode{id: "n0", state: api.StateLive, path: req.Base}
		return api.Response{Status: "tree_created", TreeID: f.tree, Root: "n0"}, nil
	case api.OpTreeFork:
		start := time.Now()
		fk, err := f.fork(req.SourceID, req.Label)
		if err != nil {
			return api.Response{}, err
		}
		fk.LatencyNS = time.Since(start).Nanoseconds()
		return api.Response{Status: "tree_forked", NodeID: fk.NodeID, Path: fk.Path, LatencyNS: fk.LatencyNS}, nil
	case api.OpTreeForkBatch:
		if len(req.Labels) == 0 {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "no labels")
		}
		start := time.Now()
		resp := api.Response{Status: "tree_fork_batch"}
		for _, l := range req.Labels {
			t0 := time.Now()
			fk, err := f.fork(req.SourceID, l)
			if err != nil {
				return api.Response{}, err
			}
			fk.LatencyNS = time.Since(t0).Nanoseconds()
			resp.Forks = append(resp.Forks, fk)
		}
		resp.LatencyNS = time.Since(start).Nanoseconds()
		return resp, nil
	case api.OpTreeCommit:
		return f.commit(req.NodeID)
	case api.OpTreeNodes:
		resp := api.Response{Status: "tree_node_list"}
		ids := make([]string, 0, len(f.nodes))
		for id := range f.nodes {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			n := f.nodes[id]
			an := api.Node{ID: n.id, Parent: n.parent, Children: slices.Clone(n.children), State: n.state, Label: n.label}
			if n.state == api.StateLive {
				an.Path = n.path
			}
			resp.Nodes = append(resp.Nodes, an)
		}
		return resp, nil
	case api.OpTreeDelete:
		for id, n := range f.nodes {
			if id != "n0" {
				if err := os.RemoveAll(n.path); err != nil {
					return api.Response{}, api.Errorf(api.ErrInternal, "delete: %v", err)
				}
			}
		}
		f.tree, f.nodes = "", map[string]*fakeNode{}
		return api.Response{Status: api.StatusOK}, nil
	}
	return api.Response{}, api.Errorf(api.ErrBadRequest, "op %q", req.Op)
}

func (f *fakeDaemon) fork(source, label string) (api.Fork, error) {
	src, ok := f.nodes[source]
	if !ok {
		return api.Fork{}, api.Errorf(api.ErrNotFound, "node %q", source)
	}
	if src.state != api.StateLive {
		return api.Fork{}, api.Errorf(api.ErrState, "node %q is %s", source, src.state)
	}
	f.nextID++
	id := fmt.Sprintf("n%d", f.nextID)
	path := filepath.Join(f.dir, id)
	if err := copyTree(src.path, path); err != nil {
		return api.Fork{}, api.Errorf(api.ErrInternal, "fork: %v", err)
	}
	f.nodes[id] = &fakeNode{id: id, parent: source, label: label, state: api.StateLive, path: path, forkedAt: src.version}
	src.children = append(src.children, id)
	if f.onFork != nil {
		f.onFork(label, path)
	}
	return api.Fork{NodeID: id, Label: label, Path: path}, nil
}

func (f *fakeDaemon) commit(id string) (api.Response, error) {
	start := time.Now()
	n, ok := f.nodes[id]
	if !ok || n.parent == "" {
		return api.Response{}, api.Errorf(api.ErrNotFound, "node %q", id)
	}
	p := f.nodes[n.parent]
	if n.state == api.StateStale || n.forkedAt != p.version {
		return api.Response{}, api.Errorf(api.ErrStale, "node %q: its parent changed since the fork", id)
	}
	entries, err := os.ReadDir(p.path)
	if err != nil {
		return api.Response{}, api.Errorf(api.ErrInternal, "commit: %v", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(p.path, e.Name())); err != nil {
			return api.Response{}, api.Errorf(api.ErrInternal, "commit: %v", err)
		}
	}
	if err := copyTree(n.path, p.path); err != nil {
		return api.Response{}, api.Errorf(api.ErrInternal, "commit: %v", err)
	}
	p.version++
	resp := api.Response{Status: "tree_committed", NodeID: id, Stale: []string{}}
	for _, c := range p.children {
		if s := f.nodes[c]; s != nil && c != id && s.forkedAt == n.forkedAt && s.state == api.StateLive {
			s.state = api.StateStale
			resp.Stale = append(resp.Stale, c)
		}
	}
	// The committed child is merged into its parent and gone.
	p.children = slices.DeleteFunc(p.children, func(c string) bool { return c == id })
	delete(f.nodes, id)
	if err := os.RemoveAll(n.path); err != nil {
		return api.Response{}, api.Errorf(api.ErrInternal, "commit: %v", err)
	}
	resp.LatencyNS = time.Since(start).Nanoseconds()
	return resp, nil
}

func (f *fakeDaemon) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops)
}

// copyTree is cp -a for regular files, directories and symlinks.
func copyTree(src, dst string) error {
	type dirTime struct {
		path string
		t    time.Time
	}
	var dirs []dirTime
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.MkdirAll(to, fi.Mode().Perm()); err != nil {
				return err
			}
			dirs = append(dirs, dirTime{to, fi.ModTime()})
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			if err := copyFile(p, to, fi.Mode().Perm()); err != nil {
				return err
			}
			return os.Chtimes(to, fi.ModTime(), fi.ModTime())
		}
		return fmt.Errorf("%s: unsupported file type %v", p, d.Type())
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(dirs[i].path, dirs[i].t, dirs[i].t); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// needPython skips without python3, or fails when ARBOR_TEST_REQUIRE is set.
func needPython(t *testing.T) {
	t.Helper()
	testenv.NeedCommand(t, testenv.Python, "python3")
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestCodingAgent runs the whole demo against the fake daemon, with the
// default 50 MiB vendored.bin, and checks every claim from the outside: the
// returned Summary, the files in results/, and the fake's own view.
func TestCodingAgent(t *testing.T) {
	needPython(t)
	// The demo must not be fooled by an environment that hides __pycache__.
	t.Setenv("PYTHONDONTWRITEBYTECODE", "1")
	fake := newFake(t)
	work := t.TempDir()
	var out bytes.Buffer
	start := time.Now()
	sum, err := CodingAgent(testCtx(t), Config{Client: fake, Workdir: work, Out: &out})
	if err != nil {
		t.Fatalf("CodingAgent: %v\n%s", err, out.String())
	}
	t.Logf("demo took %v; fork batch %d ns", time.Since(start), sum.ForkLatencyNS)

	// One fork of the source, ONE batch of three, one commit, and a delete at the end.
	ops := fake.calls()
	count := func(op string) int {
		n := 0
		for _, o := range ops {
			if o == op {
				n++
			}
		}
		return n
	}
	if count(api.OpTreeCreate) != 1 || count(api.OpTreeFork) != 1 || count(api.OpTreeForkBatch) != 1 || count(api.OpTreeCommit) != 1 {
		t.Errorf("ops = %v", ops)
	}
	if ops[len(ops)-1] != api.OpTreeDelete {
		t.Errorf("last op = %s, want %s (ops %v)", ops[len(ops)-1], api.OpTreeDelete, ops)
	}
	if _, err := os.Stat(filepath.Join(work, "bases")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the empty base dir was not removed after the delete: %v", err)
	}

	if sum.TreeID != "tree-1" || sum.SourceID == "" || len(sum.ChildIDs) != 3 || sum.ForkLatencyNS <= 0 {
		t.Errorf("ids/latency: tree %q source %q children %v latency %d", sum.TreeID, sum.SourceID, sum.ChildIDs, sum.ForkLatencyNS)
	}

	wantOutcome := map[string]string{Source: "❌ failed (real failures)", Minimal: "✅ passed", Rewrite: "✅ passed", Skip: "❌ failed"}
	for label, want := range wantOutcome {
		if got := sum.TestOutcomes[label]; got != want {
			t.Errorf("outcome %s = %q, want %q (%q)", label, got, want, sum.Tests[label].Line)
		}
	}
	if o := sum.Tests[Skip]; o.UnexpectedSuccesses != 1 || o.ExpectedFailures != 2 {
		t.Errorf("skip outcome = %+v, want 1 unexpected success and 2 expected failures", o)
	}
	if o := sum.Tests[Source]; o.Failures != 2 || o.Ran != 4 {
		t.Errorf("source outcome = %+v, want 2 failures of 4", o)
	}

	src := sum.StateEvidence[Source]
	if src.VendoredSize != DefaultVendoredBytes || len(src.VendoredMD5) != 32 {
		t.Errorf("source vendored = %d bytes md5 %q", src.VendoredSize, src.VendoredMD5)
	}
	if src.PycacheFiles < 2 {
		t.Errorf("source __pycache__ has %d files, want mathy's and tests'", src.PycacheFiles)
	}
	seen := map[string]string{}
	for _, label := range agents {
		e := sum.StateEvidence[label]
		if e.VendoredMD5 != src.VendoredMD5 || e.VendoredSize != src.VendoredSize {
			t.Errorf("%s vendored = %s/%d, source %s/%d", label, e.VendoredMD5, e.VendoredSize, src.VendoredMD5, src.VendoredSize)
		}
		if e.PycacheMD5AtFork != src.PycacheMD5AtFork {
			t.Errorf("%s __pycache__ at fork %s != source %s", label, e.PycacheMD5AtFork, src.PycacheMD5AtFork)
		}
		if label == Source {
			if e.PycacheMD5 != e.PycacheMD5AtFork {
				t.Errorf("source __pycache__ changed while the children ran")
			}
			continue
		}
		if e.PycacheMD5 == e.PycacheMD5AtFork {
			t.Errorf("%s __pycache__ did not diverge after its re-run", label)
		}
		if other, dup := seen[e.PycacheMD5]; dup {
			t.Errorf("%s and %s ended with the same __pycache__", label, other)
		}
		seen[e.PycacheMD5] = label
	}

	code := sum.InitPy
	if !strings.Contains(code[Source], "return a - b") || !strings.Contains(code[Minimal], "return a + b") ||
		!strings.Contains(code[Rewrite], "raise TypeError") || code[Skip] != code[Source] {
		t.Errorf("init.py per agent:\n%v", code)
	}
	for _, c := range sum.Checks {
		if !c.OK {
			t.Errorf("check failed: %s (%s)", c.Name, c.Detail)
		}
	}

	// The commit: minimal wins (smallest diff), its siblings are stale, the
	// source now carries the fix and passes.
	c := sum.Commit
	if c == nil || c.Label != Minimal || c.NodeID != sum.ChildIDs[Minimal] {
		t.Fatalf("commit = %+v", c)
	}
	if c.DiffLines[Minimal] != 2 || c.DiffLines[Rewrite] <= c.DiffLines[Minimal] {
		t.Errorf("diff lines = %v, want minimal 2 and rewrite more", c.DiffLines)
	}
	if c.States[Rewrite] != api.StateStale || c.States[Skip] != api.StateStale || c.States[Source] != api.StateLive {
		t.Errorf("states after commit = %v", c.States)
	}
	if !slices.Contains(c.Stale, sum.ChildIDs[Rewrite]) || !slices.Contains(c.Stale, sum.ChildIDs[Skip]) {
		t.Errorf("stale = %v", c.Stale)
	}
	if c.SourceInitPy != code[Minimal] || !c.SourceOutcome.Passed {
		t.Errorf("source after commit: outcome %+v\n%s", c.SourceOutcome, c.SourceInitPy)
	}

	// results/<UTC time, e.g. 2026-12-01T18-05-12Z>/ holds forkd's files plus the commit's.
	dir := sum.ResultsDir
	if filepath.Dir(dir) != filepath.Join(work, "results") {
		t.Errorf("results dir = %s", dir)
	}
	if ts, err := time.Parse("2006-01-02T15-04-05Z", filepath.Base(dir)); err != nil || ts.Unix() < start.Unix() || ts.After(time.Now()) {
		t.Errorf("results dir %s is not named by the run's UTC time (%v)", dir, err)
	}
	want := []string{"summary.md", "summary.json", "state-evidence.txt", "fork-batch.json", "commit.json",
		"nodes-after-commit.json", "source-after-commit-init-py.txt", "source-after-commit-agent.log"}
	for _, l := range agents {
		want = append(want, l+"-init-py.txt", l+"-agent.log")
	}
	for _, name := range want {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("results file %s: %v", name, err)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("minimal-init-py.txt"); got != code[Minimal] {
		t.Errorf("minimal-init-py.txt = %q", got)
	}
	if log := read("skip-agent.log"); !strings.Contains(log, "== unittest (source, baseline)") || !strings.Contains(log, "unexpected successes=1") {
		t.Errorf("skip-agent.log lacks the inherited source log or its own run:\n%s", log)
	}
	if log := read("source-agent.log"); strings.Contains(log, "strategy") {
		t.Errorf("a child's log leaked into the source's:\n%s", log)
	}
	lines := strings.Split(strings.TrimSpace(read("state-evidence.txt")), "\n")
	if len(lines) != 4 {
		t.Fatalf("state-evidence.txt has %d lines", len(lines))
	}
	for i, l := range agents {
		e := sum.StateEvidence[l]
		if w := fmt.Sprintf("%s %s %s %s %d", l, e.NodeID, e.PycacheMD5, e.VendoredMD5, e.VendoredSize); lines[i] != w {
			t.Errorf("state-evidence line %d = %q, want %q", i, lines[i], w)
		}
	}
	var js Summary
	if err := json.Unmarshal([]byte(read("summary.json")), &js); err != nil {
		t.Fatal(err)
	}
	if js.Commit == nil || js.Commit.Label != Minimal || js.TestOutcomes[Skip] != "❌ failed" ||
		js.StateEvidence[Rewrite].PycacheMD5AtFork != src.PycacheMD5AtFork || js.ForkLatencyNS != sum.ForkLatencyNS {
		t.Errorf("summary.json does not match the Summary: %+v", js)
	}
	md := read("summary.md")
	for _, w := range []string{
		"# coding-agent-fork on Arbor", "tree: `tree-1`", "| agent | vendored.bin size (MiB) |",
		"✓ vendored.bin identical in all four agents", "| minimal | 50.0 | `" + src.VendoredMD5[:16] + "`",
		"### skip", "Test outcome: ❌ failed (`FAILED (expected failures=2, unexpected successes=1)`)",
		"## What this run demonstrates", "## Commit: the winner becomes the source",
		"| rewrite | `" + sum.ChildIDs[Rewrite] + "` | stale |", "✓ the source's tests pass after the commit",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("summary.md lacks %q", w)
		}
	}
	if strings.Contains(md, "✗") {
		t.Errorf("summary.md reports a failed check:\n%s", md)
	}
	if !strings.Contains(out.String(), "## What this run demonstrates") || !strings.Contains(out.String(), "results: "+dir) {
		t.Errorf("Out lacks the summary:\n%s", out.String())
	}
}

// TestCodingAgentFailures drives the demo into each way it can go wrong and
// checks that it says so and still deletes the tree.
func TestCodingAgentFailures(t *testing.T) {
	needPython(t)
	tests := []struct {
		name    string
		setup   func(f *fakeDaemon, cfg *Config)
		wantErr error
		check   func(t *testing.T, sum Summary, f *fakeDaemon)
	}{
		{
			name: "fork batch refused",
			setup: func(f *fakeDaemon, _ *Config) {
				f.failOp, f.failErr = api.OpTreeForkBatch, api.Errorf(api.ErrBudget, "3 forks > 2 live")
			},
			wantErr: api.ErrBudget,
		},
		{
			name: "error reply as a Response",
			setup: func(f *fakeDaemon, _ *Config) {
				f.onReply = func(op string, r *api.Response) {
					if op == api.OpTreeFork {
						*r = api.Response{Status: api.StatusError, Code: api.CodeState, Message: "root is suspended"}
					}
				}
			},
			wantErr: api.ErrState,
		},
		{
			name: "commit loses the race",
			setup: func(f *fakeDaemon, _ *Config) {
				f.failOp, f.failErr = api.OpTreeCommit, api.Errorf(api.ErrStale, "a sibling committed first")
			},
			wantErr: api.ErrStale,
		},
		{
			name: "a child's vendored.bin differs",
			setup: func(f *fakeDaemon, _ *Config) {
				f.onFork = func(label, path string) {
					if label == Rewrite {
						if err := os.WriteFile(filepath.Join(path, vendoredPath), []byte("not the same"), 0o644); err != nil {
							panic(err)
						}
					}
				}
			},
			wantErr: ErrCheck,
			check: func(t *testing.T, sum Summary, _ *fakeDaemon) {
				for _, c := range sum.Checks {
					if c.Name == "vendored.bin identical in all four agents" && c.OK {
						t.Errorf("the vendored check passed over a corrupted child")
					}
				}
				md, err := os.ReadFile(filepath.Join(sum.ResultsDir, "summary.md"))
				if err != nil || !strings.Contains(string(md), "✗ vendored.bin identical") {
					t.Errorf("summary.md does not show the failed check: %v", err)
				}
			},
		},
		{
			name: "the siblings do not go stale",
			setup: func(f *fakeDaemon, _ *Config) {
				f.onReply = func(op string, r *api.Response) {
					if op == api.OpTreeNodes {
						for i := range r.Nodes {
							r.Nodes[i].State = api.StateLive
						}
					}
				}
			},
			wantErr: ErrCheck,
		},
		{
			name:    "agent timeout",
			setup:   func(_ *fakeDaemon, cfg *Config) { cfg.AgentTimeout = time.Millisecond },
			wantErr: context.DeadlineExceeded,
		},
		{
			name:  "keep the tree",
			setup: func(_ *fakeDaemon, cfg *Config) { cfg.KeepTree = true },
			check: func(t *testing.T, sum Summary, f *fakeDaemon) {
				if slices.Contains(f.calls(), api.OpTreeDelete) {
					t.Errorf("KeepTree, but the tree was deleted")
				}
				if sum.Commit == nil || sum.Commit.Label != Minimal {
					t.Errorf("commit = %+v", sum.Commit)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			cfg := Config{Client: f, Workdir: t.TempDir(), VendoredBytes: 64 << 10}
			tt.setup(f, &cfg)
			sum, err := CodingAgent(testCtx(t), cfg)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("CodingAgent: %v", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("CodingAgent error = %v, want %v", err, tt.wantErr)
			}
			ops := f.calls()
			if !cfg.KeepTree && ops[len(ops)-1] != api.OpTreeDelete {
				t.Errorf("the tree was not deleted last: %v", ops)
			}
			if tt.check != nil {
				tt.check(t, sum, f)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	fake := newFake(t)
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"no client", Config{}, true},
		{"no such python", Config{Client: fake, Python: "/nonexistent/python3"}, true},
		{"negative size", Config{Client: fake, Python: "sh", VendoredBytes: -1}, true},
		{"negative timeout", Config{Client: fake, Python: "sh", AgentTimeout: -time.Second}, true},
		{"defaults", Config{Client: fake, Python: "sh"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.withDefaults()
			if (err != nil) != tt.wantErr {
				t.Fatalf("withDefaults() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if !filepath.IsAbs(got.Workdir) || !filepath.IsAbs(got.Python) || got.Out == nil ||
				got.VendoredBytes != DefaultVendoredBytes || got.AgentTimeout != DefaultAgentTimeout {
				t.Errorf("defaults = %+v", got)
			}
		})
	}
	if _, err := CodingAgent(context.Background(), Config{}); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("CodingAgent without a client: %v, want ErrBadRequest", err)
	}
}

func TestAgentEnv(t *testing.T) {
	got := agentEnv([]string{"HOME=/root", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPYCACHEPREFIX=/x", "PYTHONPATH=/p", "PYTHON=/bad"})
	if want := []string{"HOME=/root", "PYTHONPATH=/p"}; !slices.Equal(got, want) {
		t.Errorf("agentEnv = %v, want %v", got, want)
	}
}

// refusingDaemon is the fake daemon with an Exec: a client that can exec,
// talking to a daemon that serves no jail trees (the fake refuses every
// backend but dir with ErrBadRequest, as arbord does one it lacks).
type refusingDaemon struct {
	*fakeDaemon
	t *testing.T
}

func (r refusingDaemon) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	r.t.Errorf("exec %v on a dir tree", req.Argv)
	return api.ExecExit{}, api.ErrNotSupported
}

// TestCodingAgentFallsBackToDir: where sandboxes are not possible (the
// daemon refuses a jail tree, or the client cannot exec) the demo runs on
// dir and says so in one line, in its output and in the summary.
func TestCodingAgentFallsBackToDir(t *testing.T) {
	needPython(t)
	for _, tc := range []struct {
		name   string
		client func(*fakeDaemon) Doer
		note   string
	}{
		{"daemon without jail", func(f *fakeDaemon) Doer { return refusingDaemon{f, t} }, "sandboxes not possible here"},
		{"client without exec", func(f *fakeDaemon) Doer { return f }, "sandboxes not possible with this client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFake(t)
			var out bytes.Buffer
			sum, err := CodingAgent(testCtx(t), Config{Client: tc.client(fake), Workdir: t.TempDir(), Out: &out, VendoredBytes: 1 << 20})
			if err != nil {
				t.Fatalf("CodingAgent: %v\n%s", err, out.String())
			}
			if sum.Backend != BackendDir || !strings.HasPrefix(sum.BackendNote, tc.note) {
				t.Errorf("backend %q, note %q; want dir, %q", sum.Backend, sum.BackendNote, tc.note)
			}
			first, _, _ := strings.Cut(out.String(), "\n")
			if !strings.HasPrefix(first, "demo: "+tc.note) || !strings.HasSuffix(first, "on the dir backend") || strings.Count(out.String(), "not possible") != 2 {
				t.Errorf("output does not say it once up front (and once in the summary):\n%s", out.String())
			}
		})
	}
	for _, cfg := range []Config{{Client: newFake(t), Backend: "qemu"}, {Client: newFake(t), Backend: BackendVM}, {Client: newFake(t), Backend: BackendJail}} {
		if _, err := CodingAgent(testCtx(t), cfg); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("backend %q with a %T: %v, want ErrBadRequest", cfg.Backend, cfg.Client, err)
		}
	}
}
