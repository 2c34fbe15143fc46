package vm

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// BenchmarkForkBatch forks a running VM (which holds a 16 MiB tmpfs blob)
// into N children per iteration: the source's pause, each child's time to
// running and to its agent's first reply, the batch's total, and the PSS
// per child after the fork and after each child dirties 10 MiB.
func BenchmarkForkBatch(b *testing.B) {
	img := image(b)
	for _, n := range []int{1, 4, 16, 50} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			src := startVM(b, img, "src")
			sh(b, src, "head -c 16777216 /dev/urandom > /tmp/blob")
			var pause, running, reply, total []time.Duration
			var pss, pssDirty []float64
			for i := 0; i < b.N; i++ {
				var dirs, names []string
				for j := range n {
					names = append(names, fmt.Sprintf("c%d", j))
					dirs = append(dirs, filepath.Join(b.TempDir(), names[j]))
				}
				t0 := time.Now()
				kids, st, err := Fork(b.Context(), src, dirs, names, nil)
				if err != nil {
					b.Fatal(err)
				}
				total = append(total, time.Since(t0))
				pause = append(pause, st.Pause)
				running = append(running, st.Running...)
				reply = append(reply, st.Reply...)
				var sum int64
				for _, k := range kids {
					p, _ := k.PSS()
					sum += p
				}
				pss = append(pss, float64(sum)/float64(n)/(1<<20))
				if i == 0 {
					sum = 0
					for _, k := range kids {
						sh(b, k, "head -c 10485760 /dev/zero | tr '\\0' x > /tmp/dirty")
					}
					for _, k := range kids {
						p, _ := k.PSS()
						sum += p
					}
					pssDirty = append(pssDirty, float64(sum)/float64(n)/(1<<20))
				}
				for _, k := range kids {
					k.Kill()
				}
			}
			b.ReportMetric(ms(median(pause)), "pause-ms")
			b.ReportMetric(ms(median(running)), "running-ms")
			b.ReportMetric(ms(median(reply)), "reply-ms")
			b.ReportMetric(ms(median(total)), "total-ms")
			b.ReportMetric(ms(median(total))/float64(n), "ms/child")
			slices.Sort(pss)
			b.ReportMetric(pss[len(pss)/2], "pss-MiB/child")
			b.ReportMetric(pssDirty[0], "pss-dirty10-MiB/child")
		})
	}
}

// BenchmarkSuspendResume: suspend (save and end) and resume (start from
// the saved state, agent answering) of a VM holding a 16 MiB blob.
func BenchmarkSuspendResume(b *testing.B) {
	img := image(b)
	v := startVM(b, img, "s")
	sh(b, v, "head -c 16777216 /dev/urandom > /tmp/blob")
	var sus, res []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := Suspend(b.Context(), v); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		w, err := Start(b.Context(), img, v.Dir(), "s", "")
		if err != nil {
			b.Fatal(err)
		}
		sus, res = append(sus, t1.Sub(t0)), append(res, time.Since(t1))
		v = w
	}
	b.Cleanup(func() { v.Kill() })
	b.ReportMetric(ms(median(sus)), "suspend-ms")
	b.ReportMetric(ms(median(res)), "resume-ms")
}
