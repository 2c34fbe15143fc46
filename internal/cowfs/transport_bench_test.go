package cowfs

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// svcTimer times the requests the benchmark sends inside the server: the
// filesystem's own work, without the transport.
type svcTimer struct {
	fuse.RawFileSystem
	mu  sync.Mutex
	lat latencies
}

func (s *svcTimer) add(t0 time.Time) {
	d := time.Since(t0)
	s.mu.Lock()
	s.lat = append(s.lat, d)
	s.mu.Unlock()
}

func (s *svcTimer) take() latencies {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lat
	s.lat = nil
	return l
}

func (s *svcTimer) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer s.add(time.Now())
	return s.RawFileSystem.GetAttr(cancel, in, out)
}

func (s *svcTimer) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer s.add(time.Now())
	return s.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

// BenchmarkRoundTrip times the bare FUSE round trip on each transport,
// side by side: an ioctl the control file does not know (ENOTTY, no work)
// and a GETATTR the kernel may not answer from its cache (statx with
// AT_STATX_FORCE_SYNC on an open file), each one syscall from this
// process. p50-us is the median per call; svc-p50-us the median time of
// the request inside the filesystem (the rest is the transport).
//
//	go test -run '^$' -bench RoundTrip -benchtime 20000x -count 5 ./internal/cowfs
func BenchmarkRoundTrip(b *testing.B) {
	for _, tr := range []string{TransportURing, TransportDev} {
		b.Run("transport="+tr, func(b *testing.B) {
			if tr == TransportURing {
				needURing(b)
			}
			st := newBenchStore(b)
			timer := &svcTimer{}
			wrapRawForTest = func(r fuse.RawFileSystem) fuse.RawFileSystem { timer.RawFileSystem = r; return timer }
			f, err := Mount(Config{Store: st, Mountpoint: b.TempDir(), Transport: tr})
			wrapRawForTest = nil
			if err != nil {
				b.Fatal(err)
			}
			defer f.Unmount(true)
			mnt := f.cfg.Mountpoint
			b.Run("ioctl", func(b *testing.B) {
				fd, err := unix.Open(filepath.Join(mnt, ctlName), unix.O_RDWR|unix.O_CLOEXEC, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer unix.Close(fd)
				timer.take()
				var lat latencies
				for b.Loop() {
					t0 := time.Now()
					_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0x6203, 0)
					lat = append(lat, time.Since(t0))
					if e != unix.ENOTTY {
						b.Fatalf("ioctl 0x6203: %v, want ENOTTY", e)
					}
				}
				lat.report(b)
				reportService(b, timer.take(), len(lat))
			})
			b.Run("getattr", func(b *testing.B) {
				fd, err := unix.Open(filepath.Join(mnt, "f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer unix.Close(fd)
				timer.take()
				var lat latencies
				var sx unix.Statx_t
				for b.Loop() {
					t0 := time.Now()
					err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &sx)
					lat = append(lat, time.Since(t0))
					if err != nil || sx.Size != 1 {
						b.Fatalf("statx: size %d, %v", sx.Size, err)
					}
				}
				lat.report(b)
				reportService(b, timer.take(), len(lat))
			})
			if tr == TransportURing && f.URingRequests() == 0 {
				b.Fatal("no request went through the rings")
			}
		})
	}
}

// reportService reports the median service time, after checking that
// every timed call was one request.
func reportService(b *testing.B, svc latencies, calls int) {
	b.Helper()
	if len(svc) < calls {
		b.Fatalf("%d requests for %d calls: the kernel answered some itself", len(svc), calls)
	}
	if len(svc) == 0 {
		return
	}
	s := slices.Clone(svc)
	slices.Sort(s)
	b.ReportMetric(float64(s[len(s)/2])/float64(time.Microsecond), "svc-p50-us")
}

func newBenchStore(b *testing.B) *store.Store {
	b.Helper()
	testenv.NeedFUSE(b)
	base := b.TempDir()
	if err := os.WriteFile(filepath.Join(base, "f"), []byte("x"), 0o644); err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(store.Config{Dir: b.TempDir(), Base: base})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}
