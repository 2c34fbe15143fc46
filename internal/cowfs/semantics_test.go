package cowfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func ioctl(t *testing.T, path string, cmd uintptr, buf []byte) error {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var arg uintptr
	if buf != nil {
		arg = uintptrOf(buf)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, arg); e != 0 {
		return e
	}
	return nil
}

func TestPassthroughServesNoData(t *testing.T) {
	f, _, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "lower"), bytes.Repeat([]byte("L"), 1<<20), 0o644) })
	if !f.Passthrough() {
		t.Fatal("passthrough is off as root")
	}
	if err := f.Create("b", "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(filepath.Join(mnt, "lower")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "new"), bytes.Repeat([]byte("N"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := os.ReadFile(filepath.Join(mnt, "new")); err != nil || len(d) != 1<<20 {
		t.Fatalf("read back: %d bytes, %v", len(d), err)
	}
	if r, w := f.Served(); r != 0 || w != 0 {
		t.Fatalf("the daemon served %d reads and %d writes; passthrough should serve all", r, w)
	}
}

func TestIoctlCreateCommitAbort(t *testing.T) {
	f, base, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "f"), []byte("base"), 0o644) })
	ctl := filepath.Join(mnt, ctlName)
	buf := make([]byte, 128)
	if err := ioctl(t, ctl, ioctlCreate, buf); err != nil {
		t.Fatal(err)
	}
	name := string(bytes.TrimRight(buf, "\x00"))
	if name == "" || f.Current() != name {
		t.Fatalf("CREATE gave %q, current %q", name, f.Current())
	}
	os.WriteFile(filepath.Join(mnt, "f"), []byte("branch"), 0o644)
	if err := ioctl(t, ctl, ioctlAbort, nil); err != nil {
		t.Fatal(err)
	}
	if d, _ := os.ReadFile(filepath.Join(mnt, "f")); string(d) != "base" || f.Current() != "main" {
		t.Fatalf("after ABORT the mount shows %s: %q", f.Current(), d)
	}
	// First commit wins through the ioctls of /@NAME/.branchfs_ctl.
	const n = 8
	for i := 0; i < n; i++ {
		if err := f.Create(fmt.Sprintf("r%d", i), "main", 0); err != nil {
			t.Fatal(err)
		}
		f.Switch("main")
		os.WriteFile(filepath.Join(mnt, fmt.Sprintf("@r%d", i), "f"), []byte(fmt.Sprintf("r%d", i)), 0o644)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = ioctl(t, filepath.Join(mnt, fmt.Sprintf("@r%d", i), ctlName), ioctlCommit, nil)
		}(i)
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("two commits won: r%d and r%d", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, unix.ESTALE):
			t.Fatalf("r%d: %v, want ESTALE", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no commit won")
	}
	if d, _ := os.ReadFile(filepath.Join(base, "f")); string(d) != fmt.Sprintf("r%d", won) {
		t.Fatalf("base has %q, want r%d's", d, won)
	}
	for i := 0; i < n; i++ {
		if i == won {
			continue
		}
		// The loser's work reads (it can be rescued) and takes no change.
		p := filepath.Join(mnt, fmt.Sprintf("@r%d", i), "f")
		if d, err := os.ReadFile(p); err != nil || string(d) != fmt.Sprintf("r%d", i) {
			t.Fatalf("loser r%d: %q, %v; want its own content", i, d, err)
		}
		if err := os.WriteFile(p, []byte("late"), 0o644); !errors.Is(err, unix.ESTALE) {
			t.Fatalf("a write to loser r%d: %v, want ESTALE", i, err)
		}
	}
}

func TestQuotaENOSPC(t *testing.T) {
	f, _, mnt := mount(t, nil)
	if err := f.Create("q", "", 64<<10); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mnt, "file")
	if err := os.WriteFile(p, bytes.Repeat([]byte("a"), 32<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fd.Write(bytes.Repeat([]byte("b"), 64<<10))
	fd.Close()
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("write past the quota: %v, want ENOSPC", err)
	}
	if d, _ := os.ReadFile(p); !bytes.Equal(d, bytes.Repeat([]byte("a"), 32<<10)) {
		t.Fatalf("the file changed: %d bytes", len(d))
	}
}

func TestIsolationOpenFdAcrossFork(t *testing.T) {
	f, _, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "log"), []byte("0"), 0o644) })
	// main holds the file open for writing across a fork.
	w, err := os.OpenFile(filepath.Join(mnt, "log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := f.Store().Fork("main", "child"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("1"); err != nil {
		t.Fatal(err)
	}
	if d, _ := os.ReadFile(filepath.Join(mnt, "@child", "log")); string(d) != "0" {
		t.Fatalf("the child sees main's write through a descriptor held across the fork: %q", d)
	}
	if d, _ := os.ReadFile(filepath.Join(mnt, "log")); string(d) != "01" {
		t.Fatalf("main: %q", d)
	}
}
