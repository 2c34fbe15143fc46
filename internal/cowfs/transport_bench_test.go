package cowfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
			for _, op := range []string{"ioctl", "getattr"} {
				b.Run(op, func(b *testing.B) {
					call, done, err := rtOp(mnt, op)
					if err != nil {
						b.Fatal(err)
					}
					defer done()
					timer.take()
					var lat latencies
					for b.Loop() {
						t0 := time.Now()
						err := call()
						lat = append(lat, time.Since(t0))
						if err != nil {
							b.Fatal(err)
						}
					}
					lat.report(b)
					reportService(b, timer.take(), len(lat))
				})
				// The same calls from another process, as a program
				// using the mount makes them (the caller is not in the
				// server's Go runtime).
				b.Run(op+"-process", func(b *testing.B) {
					timer.take()
					cmd := exec.Command(os.Args[0], "-test.run=^$")
					cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%s", rtClientEnv, op, b.N, mnt))
					cmd.Stderr = os.Stderr
					out, err := cmd.Output()
					if err != nil {
						b.Fatalf("the client: %v", err)
					}
					var p50, p90 float64
					if _, err := fmt.Sscanf(string(out), "p50-us %g p90-us %g", &p50, &p90); err != nil {
						b.Fatalf("the client printed %q: %v", out, err)
					}
					b.ReportMetric(p50, "p50-us")
					b.ReportMetric(p90, "p90-us")
					reportService(b, timer.take(), b.N)
				})
			}
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

// rtClientEnv makes the test binary a round-trip client (see TestMain):
// OP:N:MOUNTPOINT runs N calls of OP and prints their p50 and p90.
const rtClientEnv = "ARBOR_COWFS_RTCLIENT"

func rtClient(cfg string) int {
	parts := strings.SplitN(cfg, ":", 3)
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want OP:N:MOUNTPOINT\n", rtClientEnv, cfg)
		return 2
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	call, done, err := rtOp(parts[2], parts[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer done()
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		err := call()
		lat = append(lat, time.Since(t0))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	fmt.Printf("p50-us %g p90-us %g\n", us(lat[n/2]), us(lat[n*9/10]))
	return 0
}

// rtOp opens what op needs in the mount at mnt and returns one call of
// it: "ioctl", an ioctl the control file does not know (ENOTTY), or
// "getattr", a statx the kernel must ask the daemon for.
func rtOp(mnt, op string) (call func() error, done func(), err error) {
	var fd int
	switch op {
	case "ioctl":
		if fd, err = unix.Open(filepath.Join(mnt, ctlName), unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
			return nil, nil, err
		}
		call = func() error {
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0x6203, 0); e != unix.ENOTTY {
				return fmt.Errorf("ioctl 0x6203: %v, want ENOTTY", e)
			}
			return nil
		}
	case "getattr":
		if fd, err = unix.Open(filepath.Join(mnt, "f"), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return nil, nil, err
		}
		var sx unix.Statx_t
		call = func() error {
			err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &sx)
			if err == nil && sx.Size != 1 {
				err = fmt.Errorf("statx: size %d, want 1", sx.Size)
			}
			return err
		}
	default:
		return nil, nil, fmt.Errorf("no round-trip op %q", op)
	}
	return call, func() { unix.Close(fd) }, nil
}
