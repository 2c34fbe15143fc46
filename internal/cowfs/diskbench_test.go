package cowfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/store"
	"golang.org/x/sys/unix"
)

// BenchmarkWrite4k is fsbench's write-4k in a branch (4 KiB writes to new
// files, 16 MiB each, no fsync; the file before last is removed off the
// clock), per write: with no store limit (passthrough); under a limit
// with room (a tree's default budget) and near the limit, where every
// write is served and checked by the daemon (a passthrough writer could
// not be stopped at the limit).
func BenchmarkWrite4k(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit func(used int64) int64
	}{
		{"no-limit", func(int64) int64 { return 0 }},
		{"limit-room", func(int64) int64 { return 32 << 30 }},
		{"limit-near", func(used int64) int64 { return used + store.PassthroughRoom(0)*3/4 }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f, mnt := benchMount(b, 0)
			if err := os.WriteFile(filepath.Join(mnt, ctlName), []byte("create:b1"), 0); err != nil {
				b.Fatal(err)
			}
			used, _ := f.Store().Used()
			if err := f.Store().SetLimit(tc.limit(used)); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 4096)
			const perFile = 4096
			fd, n, files := -1, 0, 0
			open := func() {
				if fd >= 0 {
					unix.Close(fd)
					// Off the clock: the file before last goes, so that the
					// branch never holds more than two (32 MiB).
					os.Remove(filepath.Join(mnt, fmt.Sprintf("w%d", files-2)))
				}
				var err error
				fd, err = unix.Open(filepath.Join(mnt, fmt.Sprintf("w%d", files)), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				files++
				n = 0
			}
			open()
			for b.Loop() {
				if n == perFile {
					b.StopTimer()
					open()
					b.StartTimer()
				}
				if _, err := unix.Write(fd, buf); err != nil {
					b.Fatal(err)
				}
				n++
			}
			unix.Close(fd)
		})
	}
}
