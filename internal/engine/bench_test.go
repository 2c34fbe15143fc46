package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// BenchmarkForkBatch forks n children of the root and aborts them again, over
// the directory-copy test double (so it measures the engine and bbolt, plus
// copying a one-file base per child). It reports the daemon-measured batch
// latency as latency-ns/batch.
func BenchmarkForkBatch(b *testing.B) {
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			e := newEngine(b, b.TempDir())
			do(b, e, api.Request{Op: api.OpTreeCreate, Base: newBase(b), TreeID: "b", Budget: &api.Budget{MaxLiveNodes: 64}})
			labels := make([]string, n)
			var lat int64
			ctx := context.Background()
			for b.Loop() {
				r, err := e.Do(ctx, api.Request{Op: api.OpTreeForkBatch, TreeID: "b", SourceID: "n1", Labels: labels})
				if err != nil {
					b.Fatal(err)
				}
				lat += r.LatencyNS
				b.StopTimer()
				for _, f := range r.Forks {
					if _, err := e.Do(ctx, api.Request{Op: api.OpTreeAbort, TreeID: "b", NodeID: f.NodeID}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(lat)/float64(b.N), "latency-ns/batch")
		})
	}
}

// memFiles is an engine.Files that keeps only branch names: it isolates the
// engine's own cost (tree bookkeeping and the bbolt transaction).
type memFiles struct {
	mu sync.Mutex
	b  map[string]string // branch -> parent
}

func openMemFiles(context.Context, string, string) (engine.Files, error) {
	return &memFiles{b: map[string]string{engine.MainBranch: ""}}, nil
}

func (m *memFiles) Fork(_ context.Context, parent string, children []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range children {
		m.b[c] = parent
	}
	return nil
}
func (m *memFiles) Commit(_ context.Context, child string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.b, child)
	return nil, nil
}
func (m *memFiles) Abort(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.b, name)
	return nil
}
func (m *memFiles) Path(name string) (string, error) { return "/mem/" + name, nil }
func (m *memFiles) Branches() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for b := range m.b {
		out = append(out, b)
	}
	return out, nil
}
func (m *memFiles) DiskUsage() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for b := range m.b {
		out[b] = 0
	}
	return out
}
func (m *memFiles) SetDiskLimit(int64) error { return nil }
func (m *memFiles) Close() error             { return nil }

// BenchmarkForkBatchEngine is BenchmarkForkBatch over memFiles: the engine's
// share of a fork batch (plan, one fsynced bbolt transaction, apply, events).
func BenchmarkForkBatchEngine(b *testing.B) {
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			e, err := engine.New(engine.Config{Home: b.TempDir(), OpenFiles: openMemFiles})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			do(b, e, api.Request{Op: api.OpTreeCreate, Base: "/mem", TreeID: "b", Budget: &api.Budget{MaxLiveNodes: 64}})
			labels := make([]string, n)
			var lat int64
			ctx := context.Background()
			for b.Loop() {
				r, err := e.Do(ctx, api.Request{Op: api.OpTreeForkBatch, TreeID: "b", SourceID: "n1", Labels: labels})
				if err != nil {
					b.Fatal(err)
				}
				lat += r.LatencyNS
				b.StopTimer()
				for _, f := range r.Forks {
					e.Do(ctx, api.Request{Op: api.OpTreeAbort, TreeID: "b", NodeID: f.NodeID})
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(lat)/float64(b.N), "latency-ns/batch")
		})
	}
}
