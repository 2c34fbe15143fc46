package workspace_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// BenchmarkViewIoctl times BranchFS's control ioctls on a view (arbor
// mount), where each is a verb of the engine over the tree (a metadata
// transaction and an event besides the store's work), one syscall each,
// and reports the median as p50-us; internal/cowfs's BenchmarkIoctl is the
// same ioctl on a mount that acts on its store directly, the baseline.
//
//   - create: CREATE on the root's control file (a fork of main, over a
//     base of 100 files);
//   - commit-1KB-main: COMMIT of a branch holding one new 1 KB file into
//     main (durable);
//   - abort: ABORT of a fresh branch.
func BenchmarkViewIoctl(b *testing.B) {
	testenv.NeedFUSE(b)
	home := b.TempDir()
	s := openStack(b, home)
	b.Cleanup(func() { s.Close() })
	base, mp := b.TempDir(), filepath.Join(b.TempDir(), "m")
	for i := range 100 {
		os.WriteFile(filepath.Join(base, fmt.Sprintf("f%d", i)), []byte("x"), 0o644)
	}
	ctx := access.WithCred(context.Background(), access.Self())
	if _, err := s.Do(ctx, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp}); err != nil {
		b.Fatal(err)
	}
	ioctl := func(b *testing.B, dir string, cmd uintptr) (string, time.Duration) {
		fd, err := unix.Open(filepath.Join(dir, ".branchfs_ctl"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		var buf [128]byte
		t0 := time.Now()
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, uintptr(unsafe.Pointer(&buf[0])))
		d := time.Since(t0)
		if e != 0 {
			b.Fatalf("ioctl %#x on %s: %v", cmd, dir, e)
		}
		n := 0
		for n < len(buf) && buf[n] != 0 {
			n++
		}
		return string(buf[:n]), d
	}
	report := func(b *testing.B, lat []time.Duration) {
		slices.Sort(lat)
		if len(lat) > 0 {
			b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Microsecond), "p50-us")
		}
	}
	b.Run("create", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			name, d := ioctl(b, mp, ioctlCreate)
			lat = append(lat, d)
			b.StopTimer()
			ioctl(b, filepath.Join(mp, "@"+name), ioctlAbort)
			b.StartTimer()
		}
		report(b, lat)
	})
	b.Run("commit-1KB-main", func(b *testing.B) {
		var lat []time.Duration
		i := 0
		for b.Loop() {
			b.StopTimer()
			name, _ := ioctl(b, mp, ioctlCreate)
			i++
			if err := os.WriteFile(filepath.Join(mp, "@"+name, fmt.Sprintf("new%d", i)), make([]byte, 1024), 0o644); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			_, d := ioctl(b, filepath.Join(mp, "@"+name), ioctlCommit)
			lat = append(lat, d)
		}
		report(b, lat)
	})
	b.Run("abort", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			b.StopTimer()
			name, _ := ioctl(b, mp, ioctlCreate)
			b.StartTimer()
			_, d := ioctl(b, filepath.Join(mp, "@"+name), ioctlAbort)
			lat = append(lat, d)
		}
		report(b, lat)
	})
}
