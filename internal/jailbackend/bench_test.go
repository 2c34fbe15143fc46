package jailbackend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/arbor-dev/arbor/internal/workspace"
)

// BenchmarkFork: Fork of a live sandbox running a shell loop, into one
// child, then three, the children stopped outside the
// timer. The files are the dir backend's real files layer
// (workspace.TreeFiles: a store over a base, FUSE-mounted), the source
// being the tree's root; data=50MiB puts 50 MiB in the base (the source's
// /workspace) and 50 MiB in the source's /tmp, data=0 nothing, so the two
// show whether the fork is flat in those sizes. ns/op (a mean) includes
// the children's sandbox starts. The medians: pause-p50-ns, how long the
// source stayed frozen (its freeze, the files' fork, the /tmp fork, its
// thaw); files-p50-ns and tmp-p50-ns, the two forks inside it (the fork's
// work on the source's state, besides the cgroup freezer's).
//
// The source runs a loop: "writer" rewrites /tmp/x, so the fork often
// finds a file of /tmp open for writing, which the store keeps apart (see
// docs/BENCHMARKS.md); "spin" only spins.
func BenchmarkFork(b *testing.B) {
	for _, loop := range []string{"writer", "spin"} {
		for _, size := range []int64{0, 50 << 20} {
			for _, n := range []int{1, 3} {
				b.Run(fmt.Sprintf("loop=%s/data=%dMiB/children=%d", loop, size>>20, n), func(b *testing.B) { benchFork(b, loops[loop], size, n) })
			}
		}
	}
}

var loops = map[string]string{"writer": "while :; do echo x > /tmp/x; done", "spin": "while :; do :; done"}

func benchFork(b *testing.B, loopScript string, size int64, n int) {
	testenv.NeedRoot(b, "sandboxes need namespaces and cgroups")
	testenv.NeedFUSE(b)
	if err := Available(); err != nil {
		testenv.Missing(b, testenv.Cgroup, "no sandboxes here: "+err.Error())
	}
	ctx := context.Background()
	base := b.TempDir()
	if size > 0 {
		if err := os.WriteFile(filepath.Join(base, "big"), make([]byte, size), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	wm, err := workspace.New(workspace.Config{Home: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	tf, err := wm.OpenTreeFiles(ctx, b.TempDir(), base)
	if err != nil {
		b.Fatal(err)
	}
	defer tf.Close()
	be, err := Open(Config{})(ctx, engine.BackendConfig{Tree: "bench", Dir: b.TempDir(), Base: base})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	src, err := tf.Path(engine.MainBranch)
	if err != nil {
		b.Fatal(err)
	}
	if err := be.Start(ctx, "n1", src); err != nil {
		b.Fatal(err)
	}
	fill := fmt.Sprintf("head -c %d /dev/urandom > /tmp/big && test $(stat -c %%s /workspace/big /tmp/big 2>/dev/null | wc -l) -eq %d", size, map[bool]int{true: 2, false: 1}[size > 0])
	if x, err := be.Exec(ctx, "n1", engine.Command{Argv: []string{"sh", "-c", fill}}, func(api.ExecOutput) error { return nil }); err != nil || x.ExitCode != 0 {
		b.Fatalf("fill the source: %+v %v", x, err)
	}
	loop, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		be.Exec(loop, "n1", engine.Command{Argv: []string{"sh", "-c", loopScript}}, func(api.ExecOutput) error { return nil })
	}()
	defer func() { cancel(); <-done }()
	var pause, filesFork, tmpFork []time.Duration
	b.ResetTimer()
	for i := range b.N {
		var names []string
		for j := range n {
			names = append(names, fmt.Sprintf("c%d-%d", i, j))
		}
		err := be.Fork(ctx, "n1", names, func(ctx context.Context) ([]string, error) {
			start := time.Now()
			if err := tf.Fork(ctx, engine.MainBranch, names); err != nil {
				return nil, err
			}
			filesFork = append(filesFork, time.Since(start))
			var paths []string
			for _, c := range names {
				p, err := tf.Path(c)
				if err != nil {
					return nil, err
				}
				paths = append(paths, p)
			}
			return paths, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		pause, tmpFork = append(pause, be.(*backend).pause), append(tmpFork, be.(*backend).tmpFork)
		b.StopTimer()
		for _, c := range names {
			if err := be.Stop(ctx, c); err != nil {
				b.Fatal(err)
			}
			if err := tf.Abort(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(median(pause), "pause-p50-ns")
	b.ReportMetric(median(filesFork), "files-p50-ns")
	b.ReportMetric(median(tmpFork), "tmp-p50-ns")
}

func median(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds())
}
