package httpapi_test

import (
	"context"
	"io"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/audit"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/httpapi"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// BenchmarkRoundTripHTTP measures a verb's round trip through the HTTP
// client over loopback TCP (keep-alive) against the real engine, with the
// token check, metrics and an audit log on, as in the daemon.
func BenchmarkRoundTripHTTP(b *testing.B) {
	f := facetest.NewEngine(b)
	m, _ := metrics.New(metrics.Config{NoRuntime: true})
	base := serve(b, f, httpapi.Config{Token: testToken, Metrics: m, Audit: audit.New(io.Discard, nil)})
	c := client.NewHTTP(base, testToken, newHTTPClient(b))
	ctx := context.Background()
	if _, err := c.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: "t", Base: "/b"}); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		req  api.Request
	}{
		{"ping", api.Request{Op: api.OpPing}},
		{"protect", api.Request{Op: api.OpTreeProtect, TreeID: "t", NodeID: "n1"}},
		{"nodes", api.Request{Op: api.OpTreeNodes, TreeID: "t"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Do(ctx, bc.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
