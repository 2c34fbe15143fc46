package store

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The benchmarks of lookups while the store does long I/O (STYLE.md rule
// 18: no copy and no fsync under the store-wide lock). Each times one
// lookup+open+close of a small file, as a FUSE LOOKUP and OPEN would, over
// and over in an idle store and while the I/O runs in another goroutine,
// and reports the p50 and p99 of both in microseconds and the p99 ratio
// (target: busy p99 within 2x of idle).

const smallFiles = 200

// idleBusy is the latency figures of one run.
type idleBusy struct {
	b          *testing.B
	s          *Store
	br         *Branch // whose files the lookups open
	idle, busy []time.Duration
}

// newIdleBusy makes smallFiles small files in base (for the lookups).
func newIdleBusy(b *testing.B, base string) *idleBusy {
	for i := range smallFiles {
		p := filepath.Join(base, fmt.Sprintf("d%d/f%d", i%10, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x"), 0o644)
	}
	return &idleBusy{b: b}
}

func (m *idleBusy) op(i int) time.Duration {
	rel := fmt.Sprintf("d%d/f%d", i%10, i%smallFiles)
	t0 := time.Now()
	var st unix.Stat_t
	if _, err := m.s.ResolveStat(m.br, rel, &st); err != nil {
		m.b.Fatal(err)
	}
	fd, _, err := m.s.OpenRead(m.br, rel, unix.O_RDONLY, &st)
	if err != nil {
		m.b.Fatal(err)
	}
	unix.Close(fd)
	return time.Since(t0)
}

// run times 2000 ops in the idle store, then ops for as long as work runs
// in another goroutine; it returns how long work took.
func (m *idleBusy) run(work func()) time.Duration {
	m.idle, m.busy = m.idle[:0], m.busy[:0]
	for i := range 2000 {
		m.idle = append(m.idle, m.op(i))
	}
	done := make(chan time.Duration)
	go func() {
		t0 := time.Now()
		work()
		done <- time.Since(t0)
	}()
	time.Sleep(2 * time.Millisecond) // the work under way
	for i := 0; ; i++ {
		select {
		case took := <-done:
			if len(m.busy) == 0 {
				m.b.Fatalf("no op during %v of work", took)
			}
			return took
		default:
			m.busy = append(m.busy, m.op(i))
		}
	}
}

func (m *idleBusy) report() {
	pct := func(l []time.Duration, p int) float64 {
		l = slices.Clone(l)
		slices.Sort(l)
		return float64(l[len(l)*p/100]) / float64(time.Microsecond)
	}
	m.b.ReportMetric(pct(m.idle, 50), "idle-p50-us")
	m.b.ReportMetric(pct(m.idle, 99), "idle-p99-us")
	m.b.ReportMetric(pct(m.busy, 50), "busy-p50-us")
	m.b.ReportMetric(pct(m.busy, 99), "busy-p99-us")
	m.b.ReportMetric(pct(m.busy, 99)/pct(m.idle, 99), "p99-ratio")
}

// BenchmarkLookupDuringCopyUp: while one branch copies up a 1 GiB file (real
// data, not holes, so the copy takes its time), lookups and opens of other
// files in another branch keep their latency: the copy is made outside the
// store's lock and only published under it.
//
//	go test -run '^$' -bench BenchmarkLookupDuringCopyUp -benchtime 1x -count 3 ./internal/store/
func BenchmarkLookupDuringCopyUp(b *testing.B) {
	base, dir := b.TempDir(), b.TempDir()
	makeBig(b, base)
	m := newIdleBusy(b, base)
	var err error
	if m.s, err = Open(Config{Dir: dir, Base: base}); err != nil {
		b.Fatal(err)
	}
	defer m.s.Close()
	if err := m.s.Fork(Main, "reader"); err != nil {
		b.Fatal(err)
	}
	m.br, _ = m.s.Branch("reader")
	for n := 0; n < b.N; n++ {
		name := fmt.Sprintf("copier%d", n)
		if err := m.s.Fork(Main, name); err != nil {
			b.Fatal(err)
		}
		cp, _ := m.s.Branch(name)
		took := m.run(func() {
			fd, res, err := m.s.OpenFile(cp, "big", unix.O_WRONLY, 0, false)
			if err != nil {
				b.Error(err)
				return
			}
			unix.Close(fd)
			m.s.CloseWrite(res.Writer)
		})
		b.Logf("copy-up of 1 GiB in %v; %d ops during it", took, len(m.busy))
		if err := m.s.Abort(name); err != nil {
			b.Fatal(err)
		}
	}
	m.report()
}

// makeBig writes base/big, 1 GiB of real data (not holes, so that a copy
// takes its time).
func makeBig(b *testing.B, base string) {
	const big = 1 << 30
	bf, err := os.Create(filepath.Join(base, "big"))
	if err != nil {
		b.Fatal(err)
	}
	defer bf.Close()
	chunk := make([]byte, 8<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for off := 0; off < big; off += len(chunk) {
		if _, err := bf.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookupDuringMainCopyUp: main's first write to a 1 GiB file that
// a fork still shows from the base moves the base's inode into the fork's
// snapshot and gives main a copy; while that copy is made, lookups and opens
// in another branch keep their latency (it is made outside the lock).
//
//	go test -run '^$' -bench BenchmarkLookupDuringMainCopyUp -benchtime 1x -count 3 ./internal/store/
func BenchmarkLookupDuringMainCopyUp(b *testing.B) {
	base, dir := b.TempDir(), b.TempDir()
	makeBig(b, base)
	m := newIdleBusy(b, base)
	var err error
	if m.s, err = Open(Config{Dir: dir, Base: base}); err != nil {
		b.Fatal(err)
	}
	defer m.s.Close()
	for n := 0; n < b.N; n++ {
		reader := fmt.Sprintf("reader%d", n)
		if err := m.s.Fork(Main, reader); err != nil {
			b.Fatal(err)
		}
		m.br, _ = m.s.Branch(reader)
		main, _ := m.s.Branch(Main)
		took := m.run(func() {
			fd, res, err := m.s.OpenFile(main, "big", unix.O_WRONLY, 0, false)
			if err != nil {
				b.Error(err)
				return
			}
			unix.Close(fd)
			m.s.CloseWrite(res.Writer)
		})
		b.Logf("main's copy of 1 GiB in %v; %d ops during it", took, len(m.busy))
		if err := m.s.Abort(reader); err != nil {
			b.Fatal(err)
		}
	}
	m.report()
}

// BenchmarkMainTruncAfterFork: main's first open with O_TRUNC of a 256 MiB
// file a fork still shows, and its close. The fork's snapshot takes the
// base's inode; main's new file needs none of the old data.
//
//	go test -run '^$' -bench BenchmarkMainTruncAfterFork -benchtime 5x -count 3 ./internal/store/
func BenchmarkMainTruncAfterFork(b *testing.B) {
	base, dir := b.TempDir(), b.TempDir()
	s, err := Open(Config{Dir: dir, Base: base})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 256<<20)
	for i := range data {
		data[i] = byte(i)
	}
	main, _ := s.Branch(Main)
	for n := 0; b.Loop(); n++ {
		b.StopTimer()
		if err := os.WriteFile(filepath.Join(base, "big"), data, 0o644); err != nil {
			b.Fatal(err)
		}
		fork := fmt.Sprintf("f%d", n)
		if err := s.Fork(Main, fork); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		fd, res, err := s.OpenFile(main, "big", unix.O_WRONLY|unix.O_TRUNC, 0, false)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		s.CloseWrite(res.Writer)
		b.StopTimer()
		if err := s.Abort(fork); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkLookupDuringCommit: while a durable commit into main applies
// 500 files of 256 KiB (each fsynced, and its directory), lookups and opens
// of main's other files keep their latency: the commit is decided under
// the lock and applied without it.
//
//	go test -run '^$' -bench BenchmarkLookupDuringCommit -benchtime 1x -count 3 ./internal/store/
func BenchmarkLookupDuringCommit(b *testing.B) {
	base, dir := b.TempDir(), b.TempDir()
	m := newIdleBusy(b, base)
	var err error
	if m.s, err = Open(Config{Dir: dir, Base: base}); err != nil {
		b.Fatal(err)
	}
	defer m.s.Close()
	m.br, _ = m.s.Branch(Main)
	data := make([]byte, 256<<10)
	for n := 0; n < b.N; n++ {
		name := fmt.Sprintf("c%d", n)
		if err := m.s.Fork(Main, name); err != nil {
			b.Fatal(err)
		}
		c, _ := m.s.Branch(name)
		out := fmt.Sprintf("out%d", n)
		if err := m.s.Create(c, out, true, func(d int, nm string) error { return unix.Mkdirat(d, nm, 0o755) }); err != nil {
			b.Fatal(err)
		}
		for i := range 500 {
			err := m.s.Create(c, fmt.Sprintf("%s/g%d", out, i), false, func(d int, nm string) error {
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
		took := m.run(func() {
			if _, err := m.s.Commit(name, true); err != nil {
				b.Error(err)
			}
		})
		b.Logf("durable commit of 500 files in %v; %d ops during it", took, len(m.busy))
	}
	m.report()
}

// BenchmarkLookupDuringSmallCopyUps: while one branch copies up 400 files
// of one size under 1 MiB (a build touching many sources), lookups and
// opens of other files in another branch; "lock" copies them under the
// store's lock (as before copyAside went from 1 MiB to every file with
// data), "aside" copies them outside it and publishes them under it. It reports the copy-ups'
// own cost too, per file: copyup-us beside the lookups, alone-copyup-us
// with nothing else running.
//
//	go test -run '^$' -bench BenchmarkLookupDuringSmallCopyUps -benchtime 1x -count 3 ./internal/store/
func BenchmarkLookupDuringSmallCopyUps(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 512 << 10} {
		for _, mode := range []string{"lock", "aside"} {
			b.Run(fmt.Sprintf("%dK/%s", size>>10, mode), func(b *testing.B) {
				defer func(old int64) { copyAside = old }(copyAside)
				if mode == "lock" {
					copyAside = 1 << 20
				}
				base, dir := b.TempDir(), b.TempDir()
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(i)
				}
				const n = 400
				for i := range n {
					if err := os.WriteFile(filepath.Join(base, fmt.Sprintf("src%d", i)), data, 0o644); err != nil {
						b.Fatal(err)
					}
				}
				m := newIdleBusy(b, base)
				var err error
				if m.s, err = Open(Config{Dir: dir, Base: base}); err != nil {
					b.Fatal(err)
				}
				defer m.s.Close()
				if err := m.s.Fork(Main, "reader"); err != nil {
					b.Fatal(err)
				}
				m.br, _ = m.s.Branch("reader")
				copyAll := func(name string) {
					cp, _ := m.s.Branch(name)
					for i := range n {
						fd, res, err := m.s.OpenFile(cp, fmt.Sprintf("src%d", i), unix.O_WRONLY, 0, false)
						if err != nil {
							b.Error(err)
							return
						}
						unix.Close(fd)
						m.s.CloseWrite(res.Writer)
					}
				}
				var total, alone time.Duration
				for k := 0; k < b.N; k++ {
					for _, busy := range []bool{false, true} {
						name := fmt.Sprintf("copier%d-%v", k, busy)
						if err := m.s.Fork(Main, name); err != nil {
							b.Fatal(err)
						}
						if busy {
							total += m.run(func() { copyAll(name) })
						} else {
							t0 := time.Now()
							copyAll(name)
							alone += time.Since(t0)
						}
						if err := m.s.Abort(name); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(alone.Microseconds())/float64(b.N*n), "alone-copyup-us")
				m.report()
				b.ReportMetric(float64(total.Microseconds())/float64(b.N*n), "copyup-us")
			})
		}
	}
}
