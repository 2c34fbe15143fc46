package cowfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// benchMount mounts a store over a base of n files (100 to a directory, as
// in the store's benchmarks) and returns the mount and its mountpoint.
func benchMount(b *testing.B, n int) (*FS, string) {
	b.Helper()
	testenv.NeedFUSE(b)
	root := b.TempDir()
	base, mnt := filepath.Join(root, "base"), filepath.Join(root, "mnt")
	for _, d := range []string{base, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		d := filepath.Join(base, fmt.Sprintf("d%d", i%100))
		if i < 100 {
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	st, err := store.Open(store.Config{Dir: filepath.Join(root, "state"), Base: base})
	if err != nil {
		b.Fatal(err)
	}
	f, err := Mount(Config{Store: st, Mountpoint: mnt})
	if err != nil {
		st.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := f.Unmount(true); err != nil {
			b.Error(err)
		}
		st.Close()
	})
	return f, mnt
}

// ctlIoctl opens a control file, runs one ioctl on it and closes it,
// timing only the ioctl. out, if not nil, is the ioctl's buffer.
func ctlIoctl(b *testing.B, ctl string, cmd uintptr, out []byte) time.Duration {
	b.Helper()
	fd, err := unix.Open(ctl, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	if out == nil {
		out = make([]byte, 1)
	}
	t0 := time.Now()
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, uintptr(unsafe.Pointer(&out[0])))
	d := time.Since(t0)
	if e != 0 {
		b.Fatalf("ioctl %#x on %s: %v", cmd, ctl, e)
	}
	return d
}

// latencies collects one duration per timed operation and reports their
// median (and 90th percentile) as custom metrics.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(s[len(s)/2]), "p50-us")
	b.ReportMetric(us(s[len(s)*9/10]), "p90-us")
}

// BenchmarkIoctl times BranchFS's control ioctls through the mount, one
// syscall each (the control file's open and close are not timed), and
// reports the median as p50-us:
//
//   - create: CREATE on the root's control file forks the branch the
//     root shows (main, over a base of 100 to 100,000 files) and switches
//     the root to it; create-view does it on /@main/.branchfs_ctl, which
//     forks without switching.
//   - commit-1KB-main: COMMIT of a branch holding one new 1 KB file
//     (written through the mount) into main: durable, as the ioctl is.
//   - commit-1KB-branch: the same into a branch parent.
//   - abort-1KB: ABORT of such a branch;
//   - roundtrip: an ioctl the control file does not know, the floor.
func BenchmarkIoctl(b *testing.B) {
	sizes := []int{100, 10000, 100000}
	if testing.Short() {
		sizes = sizes[:2]
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("create/base=%d", n), func(b *testing.B) {
			f, mnt := benchMount(b, n)
			ctl := filepath.Join(mnt, ctlName)
			buf := make([]byte, 128)
			var lat latencies
			for b.Loop() {
				lat = append(lat, ctlIoctl(b, ctl, ioctlCreate, buf))
				b.StopTimer()
				name := string(buf[:bytes.IndexByte(buf, 0)])
				if f.Current() != name {
					b.Fatalf("root shows %s after creating %s", f.Current(), name)
				}
				// Back to main, and main changes: the next fork takes a
				// new snapshot, as the store's BenchmarkFork does.
				if err := f.Abort(name); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(mnt, "d0", "f0"), []byte(name), 0o644); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			lat.report(b)
		})
	}
	for _, n := range sizes[:2] {
		b.Run(fmt.Sprintf("create-view/base=%d", n), func(b *testing.B) {
			f, mnt := benchMount(b, n)
			ctl := filepath.Join(mnt, "@main", ctlName)
			buf := make([]byte, 128)
			var lat latencies
			for b.Loop() {
				lat = append(lat, ctlIoctl(b, ctl, ioctlCreate, buf))
				b.StopTimer()
				name := string(buf[:bytes.IndexByte(buf, 0)])
				if err := f.Abort(name); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(mnt, "d0", "f0"), []byte(name), 0o644); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			lat.report(b)
		})
	}
	kb := []byte(strings.Repeat("k", 1024))
	// withChange forks parent into a fresh branch and writes a new 1 KB
	// file into it through the mount; it returns the branch's control file.
	withChange := func(b *testing.B, f *FS, mnt, parent string, i int) (string, string) {
		name := fmt.Sprintf("c%d", i)
		if err := f.Store().Fork(parent, name); err != nil {
			b.Fatal(err)
		}
		view := filepath.Join(mnt, "@"+name)
		file := fmt.Sprintf("new%d", i)
		if err := os.WriteFile(filepath.Join(view, file), kb, 0o644); err != nil {
			b.Fatal(err)
		}
		return name, filepath.Join(view, ctlName)
	}
	b.Run("commit-1KB-main", func(b *testing.B) {
		f, mnt := benchMount(b, 100)
		var lat latencies
		i := 0
		for b.Loop() {
			b.StopTimer()
			i++
			_, ctl := withChange(b, f, mnt, store.Main, i)
			b.StartTimer()
			lat = append(lat, ctlIoctl(b, ctl, ioctlCommit, nil))
		}
		b.StopTimer()
		if _, err := os.Stat(filepath.Join(f.Store().Base(), fmt.Sprintf("new%d", i))); err != nil {
			b.Fatalf("the commit did not reach the base: %v", err)
		}
		lat.report(b)
	})
	b.Run("commit-1KB-branch", func(b *testing.B) {
		f, mnt := benchMount(b, 100)
		var lat latencies
		i, parent := 0, ""
		for b.Loop() {
			b.StopTimer()
			i++
			if i%64 == 1 {
				// A fresh parent now and then, so that its chain (which
				// grows by one layer per commit) stays short.
				if parent != "" {
					if err := f.Abort(parent); err != nil {
						b.Fatal(err)
					}
				}
				parent = fmt.Sprintf("p%d", i)
				if err := f.Store().Fork(store.Main, parent); err != nil {
					b.Fatal(err)
				}
			}
			_, ctl := withChange(b, f, mnt, parent, i)
			b.StartTimer()
			lat = append(lat, ctlIoctl(b, ctl, ioctlCommit, nil))
		}
		b.StopTimer()
		if _, err := os.Stat(filepath.Join(mnt, "@"+parent, fmt.Sprintf("new%d", i))); err != nil {
			b.Fatalf("the commit did not reach the parent: %v", err)
		}
		lat.report(b)
	})
	b.Run("roundtrip", func(b *testing.B) {
		// The floor under every figure above: an ioctl the control file
		// does not know (ENOTTY) goes to the daemon and back.
		_, mnt := benchMount(b, 100)
		fd, err := unix.Open(filepath.Join(mnt, ctlName), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
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
	})
	b.Run("abort-1KB", func(b *testing.B) {
		f, mnt := benchMount(b, 100)
		var lat latencies
		i := 0
		for b.Loop() {
			b.StopTimer()
			i++
			name, ctl := withChange(b, f, mnt, store.Main, i)
			b.StartTimer()
			lat = append(lat, ctlIoctl(b, ctl, ioctlAbort, nil))
			b.StopTimer()
			if _, err := f.Store().Branch(name); err == nil {
				b.Fatalf("%s is still there after ABORT", name)
			}
			b.StartTimer()
		}
		lat.report(b)
	})
}

// BenchmarkMeta times metadata calls through a branch at depth 1 over a
// base directory of 10,000 files, one op per iteration, for profiling the
// daemon side (the full comparison with native is `arbor bench fs`):
//
//   - lookup: lstat of a base file the kernel has not seen yet;
//   - stat: lstat of a file the kernel has cached;
//   - create: open O_CREAT|O_EXCL + write 1 KiB + close in a new directory;
//   - copy-up-after-stat, copy-up-after-read: the first write (open
//     O_WRONLY + write 1 byte + close) to a base file already stat'ed or
//     read (untimed);
//   - open-read: open + read 1 KiB + close of a base file;
//   - readdir: open + readdirnames + close of the 10,000-entry directory.
func BenchmarkMeta(b *testing.B) {
	const files = 10000
	setup := func(b *testing.B) (*FS, string) {
		f, mnt := benchMount(b, 0)
		base := f.Store().Base()
		if err := os.Mkdir(filepath.Join(base, "files"), 0o755); err != nil {
			b.Fatal(err)
		}
		data := []byte(strings.Repeat("x", 1024))
		for i := range files {
			if err := os.WriteFile(filepath.Join(base, "files", fmt.Sprintf("f%06d", i)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(mnt, ctlName), []byte("create:b1"), 0); err != nil {
			b.Fatal(err)
		}
		return f, mnt
	}
	b.Run("lookup", func(b *testing.B) {
		_, mnt := setup(b)
		var st unix.Stat_t
		i := 0
		for b.Loop() {
			if i == files {
				b.Fatal("out of unseen files; run with -benchtime at most 10000x")
			}
			if err := unix.Lstat(filepath.Join(mnt, "files", fmt.Sprintf("f%06d", i)), &st); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("stat", func(b *testing.B) {
		_, mnt := setup(b)
		p := filepath.Join(mnt, "files", "f000001")
		var st unix.Stat_t
		for b.Loop() {
			if err := unix.Lstat(p, &st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("create", func(b *testing.B) {
		_, mnt := setup(b)
		dir := filepath.Join(mnt, "new")
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		data := []byte(strings.Repeat("y", 1024))
		i := 0
		for b.Loop() {
			fd, err := unix.Open(filepath.Join(dir, fmt.Sprintf("n%d", i)), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := unix.Write(fd, data); err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
			i++
		}
	})
	// A first write to a file the kernel knows already, stat'ed or read
	// (untimed): the copy-up, and after a read (a passthrough open) the
	// ESTALE round trip that moves the path to a new kernel inode.
	for _, first := range []string{"stat", "read"} {
		b.Run("copy-up-after-"+first, func(b *testing.B) { benchCopyUp(b, setup, files, first == "read") })
	}
	b.Run("open-read", func(b *testing.B) {
		_, mnt := setup(b)
		p := filepath.Join(mnt, "files", "f000002")
		buf := make([]byte, 2048)
		for b.Loop() {
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := unix.Read(fd, buf); err != nil || n != 1024 {
				b.Fatalf("read: %d %v", n, err)
			}
			unix.Close(fd)
		}
	})
	b.Run("readdir", func(b *testing.B) {
		_, mnt := setup(b)
		for b.Loop() {
			d, err := os.Open(filepath.Join(mnt, "files"))
			if err != nil {
				b.Fatal(err)
			}
			names, err := d.Readdirnames(-1)
			d.Close()
			if err != nil || len(names) != files {
				b.Fatalf("readdir: %d names, %v", len(names), err)
			}
		}
	})
}

// benchCopyUp times the first write to base files the kernel knows: each
// one stat'ed, or read through a passthrough open (then the write's open
// answers ESTALE once and the kernel looks the path up again: see bind).
func benchCopyUp(b *testing.B, setup func(b *testing.B) (*FS, string), files int, read bool) {
	_, mnt := setup(b)
	var st unix.Stat_t
	i := 0
	for b.Loop() {
		if i == files {
			b.Fatal("out of base files; run with -benchtime at most 10000x")
		}
		p := filepath.Join(mnt, "files", fmt.Sprintf("f%06d", i))
		b.StopTimer()
		if read {
			if _, err := os.ReadFile(p); err != nil {
				b.Fatal(err)
			}
		} else if err := unix.Lstat(p, &st); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := unix.Write(fd, []byte("z")); err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		i++
	}
}
