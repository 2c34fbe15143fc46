package jailbackend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// BenchmarkFork: Fork of a live sandbox running a shell loop into one
// child, then three (files step: directories made beforehand), the
// children stopped outside the timer. freeze-ns is the time from the call to its files
// step: the source's freeze (its pause then lasts that, the files' fork
// and the thaw).
func BenchmarkFork(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("children=%d", n), func(b *testing.B) { benchFork(b, n) })
	}
}

func benchFork(b *testing.B, n int) {
	testenv.NeedRoot(b, "sandboxes need namespaces and cgroups")
	if err := Available(); err != nil {
		testenv.Missing(b, testenv.Cgroup, "no sandboxes here: "+err.Error())
	}
	ctx := context.Background()
	be, err := Open(Config{})(ctx, engine.BackendConfig{Tree: "bench", Dir: b.TempDir(), Base: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	src := b.TempDir()
	if err := be.Start(ctx, "n1", src); err != nil {
		b.Fatal(err)
	}
	loop, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		be.Exec(loop, "n1", engine.Command{Argv: []string{"sh", "-c", "while :; do echo x > /tmp/x; done"}}, func(api.ExecOutput) error { return nil })
	}()
	defer func() { cancel(); <-done }()
	var paths []string
	for range n {
		paths = append(paths, b.TempDir())
	}
	var freeze time.Duration
	b.ResetTimer()
	for i := range b.N {
		var names []string
		for j := range n {
			names = append(names, fmt.Sprintf("c%d-%d", i, j))
		}
		start := time.Now()
		err := be.Fork(ctx, "n1", names, func(context.Context) ([]string, error) {
			freeze += time.Since(start)
			return paths, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		for _, c := range names {
			if err := be.Stop(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(freeze.Nanoseconds())/float64(b.N), "freeze-ns")
}
