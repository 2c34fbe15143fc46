package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/metrics"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: status %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestSeries(t *testing.T) {
	g := metrics.GaugesFunc(func() []metrics.TreeGauge {
		return []metrics.TreeGauge{{
			TreeID: "t1", Nodes: map[string]int{"live": 2, "suspended": 1},
			LiveNodes: 2, MaxLiveNodes: 8, RAMBytes: 100, MaxRAMBytes: 1000,
			DiskBytes: 7, MaxDiskBytes: 70,
		}}
	})
	m, err := metrics.New(metrics.Config{Gauges: g})
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(metrics.FaceLine, "tree_fork", metrics.CodeOK, 3*time.Millisecond)
	m.Observe(metrics.FaceHTTP, "tree_commit", "stale", time.Millisecond)
	m.Observe(metrics.FaceHTTP, "", "bad_request", time.Microsecond)
	out := scrape(t, m)
	for _, want := range []string{
		`arbor_requests_total{code="ok",face="line",op="tree_fork"} 1`,
		`arbor_requests_total{code="stale",face="http",op="tree_commit"} 1`,
		`arbor_requests_total{code="bad_request",face="http",op="unknown"} 1`,
		`arbor_operation_duration_seconds_count{op="tree_fork"} 1`,
		`arbor_operation_duration_seconds_bucket{op="tree_fork",le="+Inf"} 1`,
		`arbor_trees 1`,
		`arbor_tree_nodes{state="live",tree="t1"} 2`,
		`arbor_tree_nodes{state="suspended",tree="t1"} 1`,
		`arbor_tree_usage_bytes{kind="ram",tree="t1"} 100`,
		`arbor_tree_usage_bytes{kind="disk",tree="t1"} 7`,
		`arbor_tree_budget_bytes{kind="ram",tree="t1"} 1000`,
		`arbor_tree_budget_bytes{kind="disk",tree="t1"} 70`,
		`arbor_tree_live_nodes{tree="t1"} 2`,
		`arbor_tree_max_live_nodes{tree="t1"} 8`,
		`go_goroutines`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

func TestNilAndZero(t *testing.T) {
	var m *metrics.Metrics
	m.Observe(metrics.FaceLine, "ping", metrics.CodeOK, time.Second) // must not panic
	z, err := metrics.New(metrics.Config{NoRuntime: true})
	if err != nil {
		t.Fatal(err)
	}
	out := scrape(t, z)
	if !strings.Contains(out, "arbor_trees 0") {
		t.Errorf("zero config: want arbor_trees 0, got:\n%s", out)
	}
	if strings.Contains(out, "go_goroutines") {
		t.Errorf("NoRuntime: runtime collector registered")
	}
}

func TestSeparateRegistries(t *testing.T) {
	// Two Metrics in one process must not collide (no global registry).
	for range 2 {
		if _, err := metrics.New(metrics.Config{}); err != nil {
			t.Fatal(err)
		}
	}
}
