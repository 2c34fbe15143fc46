package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/jailbackend"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// benchDaemon runs the real daemon in-process (workspaces, engine, tree
// files on FUSE, both faces) and returns a socket client, an HTTP client and
// a tree "b" over a one-file base whose budget fits 64 live nodes.
func benchDaemon(b *testing.B) (*client.Client, *client.HTTPClient, string) {
	testenv.NeedFUSE(b)
	dir := tempDir(b)
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	writeFile(b, filepath.Join(base, "a.txt"), "a")
	addr := freeAddr(b)
	startDaemon(b, Config{Home: home, HTTPAddr: addr, Token: testToken})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	b.Cleanup(func() { cl.Close() })
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	b.Cleanup(tr.CloseIdleConnections)
	hc := client.NewHTTP("http://"+addr, testToken, &http.Client{Transport: tr})
	ctx := context.Background()
	r, err := cl.Do(ctx, api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "b", Budget: &api.Budget{MaxLiveNodes: 64}})
	if err != nil {
		b.Fatal(err)
	}
	// Wait for HTTP to answer.
	for i := 0; ; i++ {
		if _, err := hc.Do(ctx, api.Request{Op: api.OpPing}); err == nil {
			break
		} else if i == 200 {
			b.Fatalf("HTTP face: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cl, hc, r.Root
}

// p50 reports the median of ds as name.
func p50(b *testing.B, ds []time.Duration, name string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), name)
}

// BenchmarkDaemonForkBatch is tree_fork_batch of n children of a files-only
// node through the real daemon over its socket. It reports the
// daemon-measured latency_ns of the batch and the client's round trip, p50
// each; the children are aborted between iterations, off the clock.
func BenchmarkDaemonForkBatch(b *testing.B) {
	cl, _, root := benchDaemon(b)
	ctx := context.Background()
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			labels := make([]string, n)
			for i := range labels {
				labels[i] = fmt.Sprintf("c%d", i)
			}
			var lat, rt []time.Duration
			for b.Loop() {
				start := time.Now()
				r, err := cl.Do(ctx, api.Request{Op: api.OpTreeForkBatch, TreeID: "b", SourceID: root, Labels: labels})
				rt = append(rt, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if len(r.Forks) != n {
					b.Fatalf("%d forks, want %d", len(r.Forks), n)
				}
				lat = append(lat, time.Duration(r.LatencyNS))
				b.StopTimer()
				for _, f := range r.Forks {
					if _, err := cl.Do(ctx, api.Request{Op: api.OpTreeAbort, TreeID: "b", NodeID: f.NodeID}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			p50(b, lat, "latency-p50-ns")
			p50(b, rt, "roundtrip-p50-ns")
		})
	}
}

// BenchmarkDaemonRoundTrip is one verb's round trip through the real
// daemon, over the socket and over HTTP (loopback, bearer token): ping (the
// router alone), tree_protect (a bbolt write) and tree_nodes on a one-node
// tree (the engine and the tree files' disk usage).
func BenchmarkDaemonRoundTrip(b *testing.B) {
	cl, hc, root := benchDaemon(b)
	ctx := context.Background()
	faces := []struct {
		name string
		do   func(context.Context, api.Request) (api.Response, error)
	}{{"socket", cl.Do}, {"http", hc.Do}}
	for _, f := range faces {
		for _, v := range []struct {
			name string
			req  api.Request
		}{
			{"ping", api.Request{Op: api.OpPing}},
			{"protect", api.Request{Op: api.OpTreeProtect, TreeID: "b", NodeID: root}},
			{"nodes", api.Request{Op: api.OpTreeNodes, TreeID: "b"}},
		} {
			b.Run(f.name+"/"+v.name, func(b *testing.B) {
				var rt []time.Duration
				for b.Loop() {
					start := time.Now()
					if _, err := f.do(ctx, v.req); err != nil {
						b.Fatal(err)
					}
					rt = append(rt, time.Since(start))
				}
				p50(b, rt, "p50-ns")
			})
		}
	}
}

// BenchmarkFiles is a 64 MiB file written to a node and read back through
// the real daemon (dir tree, files on FUSE), over each face: the socket's
// chunked lines and HTTP's streamed bodies. It reports MB/s.
func BenchmarkFiles(b *testing.B) {
	cl, hc, root := benchDaemon(b)
	ctx := context.Background()
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	type face struct {
		name  string
		write func() error
		read  func() error
	}
	for _, f := range []face{
		{"line", func() error {
			_, err := cl.WriteFile(ctx, "b", root, "big", 0, bytes.NewReader(data))
			return err
		}, func() error {
			_, err := cl.ReadFile(ctx, "b", root, "big", io.Discard)
			return err
		}},
		{"http", func() error {
			_, err := hc.WriteFile(ctx, "b", root, "big", 0, bytes.NewReader(data))
			return err
		}, func() error {
			_, err := hc.ReadFile(ctx, "b", root, "big", io.Discard)
			return err
		}},
	} {
		for _, dir := range []string{"write", "read"} {
			op := f.write
			if dir == "read" {
				op = f.read
			}
			b.Run(f.name+"/"+dir, func(b *testing.B) {
				if err := f.write(); err != nil { // the file to read
					b.Fatal(err)
				}
				b.SetBytes(int64(len(data)))
				b.ResetTimer()
				for b.Loop() {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkJailExec is the round trip of `true` in a live jail node
// through the real daemon, over the socket and over HTTP (collected and
// NDJSON).
func BenchmarkJailExec(b *testing.B) {
	testenv.NeedFUSE(b)
	if err := jailbackend.Available(); err != nil {
		testenv.Missing(b, testenv.Cgroup, "no sandboxes here: "+err.Error())
	}
	cl, hc, _ := benchDaemon(b)
	ctx := context.Background()
	base := tempDir(b)
	r, err := cl.Do(ctx, api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "bj", Backend: "jail"})
	if err != nil {
		b.Fatal(err)
	}
	req := api.Request{TreeID: "bj", NodeID: r.Root, Argv: []string{"true"}}
	discard := func(api.ExecOutput) error { return nil }
	for _, f := range []struct {
		name string
		run  func() error
	}{
		{"line", func() error { _, err := cl.Exec(ctx, req, discard); return err }},
		{"http-collected", func() error { _, err := hc.ExecCollect(ctx, req); return err }},
		{"http-ndjson", func() error { _, err := hc.Exec(ctx, req, discard); return err }},
	} {
		b.Run(f.name, func(b *testing.B) {
			for b.Loop() {
				if err := f.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
