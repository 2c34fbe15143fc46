package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Faces, the values of the face label.
const (
	FaceLine = "line"
	FaceHTTP = "http"
	// FaceCtl: the verbs a view's control files (writes and ioctls on
	// .branchfs_ctl) ask for.
	FaceCtl = "ctl"
	FaceMCP = "mcp" // the MCP server's tool calls (internal/mcpserver)
)

// CodeOK is the code label of a successful request.
const CodeOK = "ok"

// OpUnknown is the op label of a request whose op is not a known verb.
const OpUnknown = "unknown"

// TreeGauge is one tree's state at scrape time.
type TreeGauge struct {
	TreeID string
	// Nodes counts the tree's nodes by state (api.StateLive, ...).
	Nodes        map[string]int
	LiveNodes    int
	MaxLiveNodes int
	RAMBytes     int64
	MaxRAMBytes  int64
	DiskBytes    int64
	MaxDiskBytes int64
}

// Gauges reports the trees at scrape time. It is called from the scraping
// goroutine and must be safe for concurrent use.
type Gauges interface {
	TreeGauges() []TreeGauge
}

// GaugesFunc adapts a function to Gauges.
type GaugesFunc func() []TreeGauge

// TreeGauges calls f.
func (f GaugesFunc) TreeGauges() []TreeGauge { return f() }

// Config configures New. Its zero value is valid: no tree gauges.
type Config struct {
	// Gauges feeds the per-tree gauges; nil reports none (arbor_trees 0).
	Gauges Gauges
	// Buckets are the histogram buckets in seconds; nil means 10 µs to ~30 s.
	Buckets []float64
	// NoRuntime leaves out the Go runtime and process collectors.
	NoRuntime bool
}

// Metrics holds the daemon's registry and its series. A nil *Metrics records
// nothing.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	conns    prometheus.Gauge
	limited  *prometheus.CounterVec
}

// The reasons of arbor_line_connections_limited_total.
const (
	LimitConns  = "max_conns"         // the connection cap
	LimitPerUID = "max_conns_per_uid" // the per-uid cap
	LimitFDs    = "out_of_fds"        // accept failed for want of descriptors
	LimitIdle   = "idle"              // closed after the idle timeout
	// LimitLineBudget: closed because its partial line would take the
	// bytes buffered for incomplete lines past the daemon's budget.
	LimitLineBudget = "line_budget"
)

// New builds a Metrics with its own registry.
func New(cfg Config) (*Metrics, error) {
	buckets := cfg.Buckets
	if buckets == nil {
		buckets = prometheus.ExponentialBuckets(10e-6, 3, 15) // 10 µs .. ~48 s
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbor_requests_total",
			Help: "Requests served, by face, op and result code.",
		}, []string{"face", "op", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "arbor_operation_duration_seconds",
			Help:    "Time to serve an operation, measured at the face around the engine call.",
			Buckets: buckets,
		}, []string{"op"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "arbor_line_connections",
			Help: "Connections open on the JSON-lines socket.",
		}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbor_line_connections_limited_total",
			Help: "Connections of the JSON-lines socket refused or closed by a limit, by reason (max_conns, max_conns_per_uid, out_of_fds, idle).",
		}, []string{"reason"}),
	}
	cs := []prometheus.Collector{m.requests, m.duration, m.conns, m.limited, treeCollector{cfg.Gauges}}
	if !cfg.NoRuntime {
		cs = append(cs, collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe records one served request: face and op label it, code is CodeOK
// or an api error code, d is the time spent serving it.
func (m *Metrics) Observe(face, op, code string, d time.Duration) {
	if m == nil {
		return
	}
	if op == "" {
		op = OpUnknown
	}
	m.requests.WithLabelValues(face, op, code).Inc()
	m.duration.WithLabelValues(op).Observe(d.Seconds())
}

// Conns records a connection opened (+1) or closed (-1).
func (m *Metrics) Conns(delta int) {
	if m != nil {
		m.conns.Add(float64(delta))
	}
}

// Limited records a connection refused or closed by a limit (Limit*).
func (m *Metrics) Limited(reason string) {
	if m != nil {
		m.limited.WithLabelValues(reason).Inc()
	}
}

// Registry returns the private registry, for callers that add their own
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

var (
	descTrees = prometheus.NewDesc("arbor_trees", "Trees the daemon holds.", nil, nil)
	descNodes = prometheus.NewDesc("arbor_tree_nodes",
		"Nodes of a tree by state.", []string{"tree", "state"}, nil)
	descUsage = prometheus.NewDesc("arbor_tree_usage_bytes",
		"Bytes a tree holds, by kind (ram: live RAM; disk).", []string{"tree", "kind"}, nil)
	descBudget = prometheus.NewDesc("arbor_tree_budget_bytes",
		"A tree's budget in bytes, by kind (ram: max live RAM; disk).", []string{"tree", "kind"}, nil)
	descLive = prometheus.NewDesc("arbor_tree_live_nodes",
		"Live nodes of a tree.", []string{"tree"}, nil)
	descMaxLive = prometheus.NewDesc("arbor_tree_max_live_nodes",
		"A tree's budget of live nodes.", []string{"tree"}, nil)
)

// treeCollector turns a Gauges snapshot into const metrics at scrape time.
type treeCollector struct{ g Gauges }

func (treeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTrees, descNodes, descUsage, descBudget, descLive, descMaxLive} {
		ch <- d
	}
}

func (c treeCollector) Collect(ch chan<- prometheus.Metric) {
	var trees []TreeGauge
	if c.g != nil {
		trees = c.g.TreeGauges()
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descTrees, float64(len(trees)))
	for _, t := range trees {
		for state, n := range t.Nodes {
			gauge(descNodes, float64(n), t.TreeID, state)
		}
		gauge(descUsage, float64(t.RAMBytes), t.TreeID, "ram")
		gauge(descUsage, float64(t.DiskBytes), t.TreeID, "disk")
		gauge(descBudget, float64(t.MaxRAMBytes), t.TreeID, "ram")
		gauge(descBudget, float64(t.MaxDiskBytes), t.TreeID, "disk")
		gauge(descLive, float64(t.LiveNodes), t.TreeID)
		gauge(descMaxLive, float64(t.MaxLiveNodes), t.TreeID)
	}
}
