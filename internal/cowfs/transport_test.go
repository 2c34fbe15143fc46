package cowfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// needURing turns FUSE over io_uring on (as root), or skips where the
// kernel has none (it is not a capability a host can be asked for: Linux
// 6.14+ only).
func needURing(t testing.TB) {
	t.Helper()
	testenv.NeedFUSE(t)
	on, _, err := fusemount.EnableURing()
	if errors.Is(err, fusemount.ErrNoURing) {
		t.Skip(err)
	}
	if !on {
		testenv.Missing(t, testenv.Root, "FUSE over io_uring is off and cannot be turned on: "+err.Error())
	}
}

// TestTransports mounts a store on each transport and checks that the
// requests went where the transport says: every one through the rings on
// io_uring (the counter), none on /dev/fuse.
func TestTransports(t *testing.T) {
	needURing(t)
	st := newStore(t, func(b string) {
		os.WriteFile(filepath.Join(b, "a"), []byte("base"), 0o644)
		os.Mkdir(filepath.Join(b, "d"), 0o755)
	})
	for _, tr := range []string{TransportURing, TransportDev, TransportAuto} {
		mnt := t.TempDir()
		f, err := Mount(Config{Store: st, Mountpoint: mnt, Transport: tr})
		if err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		want := "io_uring"
		if tr == TransportDev {
			want = "dev"
		}
		if f.Transport() != want {
			t.Errorf("%s: transport %q, want %q", tr, f.Transport(), want)
		}
		before := f.URingRequests()
		for i := 0; i < 20; i++ {
			if d, err := os.ReadFile(filepath.Join(mnt, "a")); err != nil || string(d) != "base" {
				t.Fatalf("%s: read a: %q, %v", tr, d, err)
			}
			if _, err := os.Stat(filepath.Join(mnt, "d")); err != nil {
				t.Fatalf("%s: %v", tr, err)
			}
		}
		if err := os.WriteFile(filepath.Join(mnt, "d", "new"), []byte("x"), 0o644); err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		if ents, err := os.ReadDir(filepath.Join(mnt, "d")); err != nil || len(ents) != 1 {
			t.Fatalf("%s: readdir: %v, %v", tr, ents, err)
		}
		if err := os.Remove(filepath.Join(mnt, "d", "new")); err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		served := f.URingRequests() - before
		if want == "io_uring" && served < 40 {
			t.Errorf("%s: %d requests through the rings, want at least 40", tr, served)
		}
		if want == "dev" && served != 0 {
			t.Errorf("%s: %d requests through the rings", tr, served)
		}
		t.Logf("%s: transport %s, %d requests through the rings", tr, f.Transport(), served)
		if err := f.Unmount(true); err != nil {
			t.Fatal(err)
		}
	}
}

// A transport that names none is a bad request, and mounts nothing.
func TestTransportUnknown(t *testing.T) {
	st := newStoreNoFUSE(t)
	_, err := Mount(Config{Store: st, Mountpoint: t.TempDir(), Transport: "carrier-pigeon"})
	if !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "carrier-pigeon") {
		t.Fatalf("Mount with an unknown transport: %v", err)
	}
}

// TestTransportFallback turns io_uring off for a moment (as root): auto
// then mounts on /dev/fuse and says why, and uring refuses to mount.
func TestTransportFallback(t *testing.T) {
	needURing(t)
	if err := os.WriteFile(fusemount.URingParam, []byte("N\n"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(fusemount.URingParam, []byte("Y\n"), 0); err != nil {
			t.Error(err)
		}
	})
	st := newStore(t, func(b string) { os.WriteFile(filepath.Join(b, "a"), []byte("base"), 0o644) })
	f, err := Mount(Config{Store: st, Mountpoint: t.TempDir(), Transport: TransportAuto})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Unmount(true)
	if got := f.Transport(); !strings.HasPrefix(got, "dev (io_uring: ") || !strings.Contains(got, "enable_uring") {
		t.Errorf("auto with io_uring off: transport %q", got)
	}
	if d, err := os.ReadFile(filepath.Join(f.cfg.Mountpoint, "a")); err != nil || string(d) != "base" {
		t.Fatalf("read a: %q, %v", d, err)
	}
	mnt := t.TempDir()
	if _, err := Mount(Config{Store: st, Mountpoint: mnt, Transport: TransportURing}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("uring with io_uring off: %v, want unavailable", err)
	}
	if m, ok := fusemount.Find(mnt); ok && m.IsFUSE() {
		t.Fatalf("the refused mount is still there: %+v", m)
	}
}
