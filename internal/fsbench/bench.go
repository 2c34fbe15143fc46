package fsbench

import (
	"context"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// Bench runs the cases as sub-benchmarks of b, named <system>/<case>, so
// `go test -bench` can time them (BenchmarkFS does this for the baselines;
// Arbor's packages call it with their own systems). Each b.N iteration is
// one round; ns/op is the timed part of a round, and the case's per-op
// figure is reported as ns/file, ns/read or ns/branch where it applies.
// Unavailable systems and cases are skipped.
func Bench(b *testing.B, cfg Config, systems []System) {
	ctx := b.Context()
	cfg.Rounds = 1
	h, systems, cases, err := open(ctx, cfg, systems)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.close)
	for _, s := range systems {
		b.Run(s.Name(), func(b *testing.B) {
			var mainCases, baseCases []*caseDef
			for _, c := range cases {
				if c.branchBase != nil {
					baseCases = append(baseCases, c)
				} else {
					mainCases = append(mainCases, c)
				}
			}
			if len(mainCases) > 0 {
				root, err := h.setup(ctx, s, h.base)
				if errors.Is(err, errors.ErrUnsupported) {
					b.Skip(err)
				}
				if err != nil {
					b.Fatal(err)
				}
				ok := true
				if err := h.prepareSystem(ctx, root, true); err != nil {
					b.Error(err)
					ok = false
				}
				for _, c := range mainCases {
					if ok {
						b.Run(c.name, func(b *testing.B) { h.benchCase(ctx, b, s, root, h.base, c) })
					}
				}
				if err := h.teardown(ctx, s); err != nil {
					b.Error(err)
				}
			}
			for _, c := range baseCases {
				if _, ok := s.(Brancher); !ok {
					continue
				}
				base := h.branchBases[c.branchBase(h.cfg)]
				root, err := h.setup(ctx, s, base)
				if err != nil {
					b.Error(err)
					continue
				}
				b.Run(c.name, func(b *testing.B) { h.benchCase(ctx, b, s, root, base, c) })
				if err := h.teardown(ctx, s); err != nil {
					b.Error(err)
				}
			}
		})
	}
}

func (h *harness) benchCase(ctx context.Context, b *testing.B, s System, root, base string, c *caseDef) {
	e := &env{h: h, sys: s, root: root, base: base}
	if reason := c.skipReason(e); reason != "" {
		b.Skip(reason)
	}
	if c.cold && !isRoot() {
		b.Skip("cold cases drop caches, which needs root")
	}
	round := func(r int) (int, int64) {
		if c.syncFirst {
			unix.Sync()
		}
		if c.cold {
			if err := h.dropCaches(ctx, s, root); err != nil {
				b.Fatal(err)
			}
		}
		e.round = r
		e.sw = stopwatch{onStart: b.StartTimer, onStop: b.StopTimer}
		ops, n, err := c.run(ctx, e)
		if errors.Is(err, errors.ErrUnsupported) {
			b.Skip(err)
		}
		if err != nil {
			b.Fatal(err)
		}
		return ops, n
	}
	b.StopTimer()
	if c.warmup {
		round(0)
	}
	b.ResetTimer()
	var ops int
	var n int64
	for i := range b.N {
		ops, n = round(i + 1)
	}
	if n > 0 {
		b.SetBytes(n)
	}
	if ops > 1 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ops), "ns/"+c.opName())
	}
}

// opName names what one op of a case is, for benchmark metrics.
func (c *caseDef) opName() string {
	switch {
	case c.brancher:
		return "branch"
	case c.uses&useBig != 0:
		return "read"
	default:
		return "file"
	}
}
