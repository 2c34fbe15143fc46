package lineapi_test

import (
	"context"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/lineapi"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// BenchmarkRoundTripSocket measures a verb's round trip through client over
// the Unix socket against the real engine over the directory-copy files (mostly the face's cost: encode,
// write, serve, read, decode), with metrics on as in the daemon.
func BenchmarkRoundTripSocket(b *testing.B) {
	f := facetest.NewEngine(b)
	m, _ := metrics.New(metrics.Config{NoRuntime: true})
	path := serve(b, f, lineapi.Config{Metrics: m})
	ctx := context.Background()
	c, err := client.Dial(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TreeCreate(ctx, client.TreeSpec{TreeID: "t", Base: "/b"}); err != nil {
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
	b.Run("ping-parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Do(ctx, api.Request{Op: api.OpPing}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("ping-ctx-deadline", func(b *testing.B) {
		dctx, cancel := context.WithTimeout(ctx, 60e9)
		defer cancel()
		for b.Loop() {
			if _, err := c.Do(dctx, api.Request{Op: api.OpPing}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
