package store

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkLookupDuringCopyUp: while one branch copies up a 1 GiB file (real
// data, not holes, so the copy takes its time), lookups and opens of other
// files in other branches keep their latency: the copy is made outside the
// store's lock and only published under it. It reports the p50 and p99 of
// one lookup+open+close in an idle store and during the copy, in
// microseconds, and their p99 ratio (target: busy p99 within 2x of idle).
//
//	go test -run '^$' -bench BenchmarkLookupDuringCopyUp -benchtime 1x ./internal/store/
func BenchmarkLookupDuringCopyUp(b *testing.B) {
	base, dir := b.TempDir(), b.TempDir()
	const big = 1 << 30
	bf, err := os.Create(filepath.Join(base, "big"))
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 8<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for off := 0; off < big; off += len(chunk) {
		if _, err := bf.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	bf.Close()
	const small = 200
	for i := range small {
		p := filepath.Join(base, fmt.Sprintf("d%d/f%d", i%10, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x"), 0o644)
	}
	s, err := Open(Config{Dir: dir, Base: base})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Fork(Main, "reader", "other"); err != nil {
		b.Fatal(err)
	}
	rd, _ := s.Branch("reader")
	// One op: resolve and open a small file of another branch, as a FUSE
	// LOOKUP and OPEN would.
	op := func(i int) time.Duration {
		rel := fmt.Sprintf("d%d/f%d", i%10, i%small)
		t0 := time.Now()
		var st unix.Stat_t
		if _, err := s.ResolveStat(rd, rel, &st); err != nil {
			b.Fatal(err)
		}
		fd, _, err := s.OpenRead(rd, rel, unix.O_RDONLY, &st)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		return time.Since(t0)
	}
	pct := func(l []time.Duration, p int) float64 {
		slices.Sort(l)
		return float64(l[len(l)*p/100]) / float64(time.Microsecond)
	}
	var idle50, idle99, busy50, busy99 float64
	for n := 0; n < b.N; n++ {
		var idle []time.Duration
		for i := range 2000 {
			idle = append(idle, op(i))
		}
		name := fmt.Sprintf("copier%d", n)
		if err := s.Fork(Main, name); err != nil {
			b.Fatal(err)
		}
		cp, _ := s.Branch(name)
		var wg sync.WaitGroup
		done := make(chan struct{})
		var copyTime time.Duration
		wg.Go(func() {
			defer close(done)
			t0 := time.Now()
			fd, res, err := s.OpenFile(cp, "big", unix.O_WRONLY, 0, false)
			if err != nil {
				b.Error(err)
				return
			}
			unix.Close(fd)
			s.CloseWrite(res.Real)
			copyTime = time.Since(t0)
		})
		var busy []time.Duration
		time.Sleep(5 * time.Millisecond) // the copy under way
		for i := 0; ; i++ {
			select {
			case <-done:
			default:
				busy = append(busy, op(i))
				continue
			}
			break
		}
		wg.Wait()
		if len(busy) == 0 {
			b.Fatalf("only %d ops during a copy-up of %v", len(busy), copyTime)
		}
		idle50, idle99, busy50, busy99 = pct(idle, 50), pct(idle, 99), pct(busy, 50), pct(busy, 99)
		b.Logf("copy-up of 1 GiB in %v; %d ops during it", copyTime, len(busy))
		if err := s.Abort(name); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(idle50, "idle-p50-us")
	b.ReportMetric(idle99, "idle-p99-us")
	b.ReportMetric(busy50, "busy-p50-us")
	b.ReportMetric(busy99, "busy-p99-us")
	b.ReportMetric(busy99/idle99, "p99-ratio")
}

// BenchmarkLookupDuringCommit: while a durable commit into main applies
// 500 files of 256 KiB (each fsynced, and its directory), lookups and opens
// of main's other files keep their latency: the commit is decided under
// the lock and applied without it.
//
//	go test -run '^$' -bench BenchmarkLookupDuringCommit -benchtime 1x ./internal/store/
func BenchmarkLookupDuringCommit(b *testing.B) {
	base, dir := b.TempDir(), b.TempDir()
	const small = 200
	for i := range small {
		p := filepath.Join(base, fmt.Sprintf("d%d/f%d", i%10, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x"), 0o644)
	}
	s, err := Open(Config{Dir: dir, Base: base})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m, _ := s.Branch(Main)
	op := func(i int) time.Duration {
		rel := fmt.Sprintf("d%d/f%d", i%10, i%small)
		t0 := time.Now()
		var st unix.Stat_t
		if _, err := s.ResolveStat(m, rel, &st); err != nil {
			b.Fatal(err)
		}
		fd, _, err := s.OpenRead(m, rel, unix.O_RDONLY, &st)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		return time.Since(t0)
	}
	pct := func(l []time.Duration, p int) float64 {
		slices.Sort(l)
		return float64(l[len(l)*p/100]) / float64(time.Microsecond)
	}
	data := make([]byte, 256<<10)
	var idle50, idle99, busy50, busy99 float64
	for n := 0; n < b.N; n++ {
		name := fmt.Sprintf("c%d", n)
		if err := s.Fork(Main, name); err != nil {
			b.Fatal(err)
		}
		c, _ := s.Branch(name)
		for i := range 500 {
			rel := fmt.Sprintf("out%d/g%d", n, i)
			if i == 0 {
				if err := s.Create(c, fmt.Sprintf("out%d", n), true, func(d int, nm string) error { return unix.Mkdirat(d, nm, 0o755) }); err != nil {
					b.Fatal(err)
				}
			}
			err := s.Create(c, rel, false, func(d int, nm string) error {
				fd, err := unix.Openat(d, nm, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				_, err = unix.Write(fd, data)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		var idle []time.Duration
		for i := range 2000 {
			idle = append(idle, op(i))
		}
		done := make(chan struct{})
		var commitTime time.Duration
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(done)
			t0 := time.Now()
			if _, err := s.Commit(name, true); err != nil {
				b.Error(err)
			}
			commitTime = time.Since(t0)
		})
		var busy []time.Duration
		time.Sleep(2 * time.Millisecond)
		for i := 0; ; i++ {
			select {
			case <-done:
			default:
				busy = append(busy, op(i))
				continue
			}
			break
		}
		wg.Wait()
		if len(busy) == 0 {
			b.Fatalf("no op during a commit of %v", commitTime)
		}
		idle50, idle99, busy50, busy99 = pct(idle, 50), pct(idle, 99), pct(busy, 50), pct(busy, 99)
		b.Logf("durable commit of 500 files in %v; %d ops during it", commitTime, len(busy))
	}
	b.ReportMetric(idle50, "idle-p50-us")
	b.ReportMetric(idle99, "idle-p99-us")
	b.ReportMetric(busy50, "busy-p50-us")
	b.ReportMetric(busy99, "busy-p99-us")
	b.ReportMetric(busy99/idle99, "p99-ratio")
}
