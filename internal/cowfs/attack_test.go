package cowfs

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/store/attacktest"
	"golang.org/x/sys/unix"
)

// TestAttackerHelper is not a test: it is the attacker's process
// (attacktest.Helper).
func TestAttackerHelper(t *testing.T) { attacktest.Helper(t) }

// open opens p as a careful root client does: no symlink followed on the
// way (the mount shows the attacker's symlinks as they come and go).
func open(p string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = 0o644
	}
	return unix.Openat2(unix.AT_FDCWD, p, &how)
}

// TestAttackThroughMount: uid 65534 owns the base and swaps its file f and
// its directory d with symlinks to root's secret and root's directory,
// while root works through mounts of main and of a branch: chmod, chown,
// truncate, utimes, xattrs, fsync and writes of f and d/x (node.Setattr,
// setattrPath, Fsync, the copy-ups), creates under d, reads. Root's files
// never change and the secret is never read.
func TestAttackThroughMount(t *testing.T) {
	h := attacktest.New(t)
	h.Put(t, map[string]string{"f": "mine", "d/x": "mine"})
	st, err := store.Open(store.Config{Dir: t.TempDir(), Base: h.Base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	_, mainMnt := mountStore(t, st, "", 0)
	h.Attack(t, "TestAttackerHelper", "f="+h.Secret+",d="+h.Etc)
	deadline := time.Now().Add(4 * time.Second)
	done := 0 // chmods and opens for writing that went through
	for i := 0; i < 20 && time.Now().Before(deadline); i++ {
		name := "b" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if err := st.Fork(store.Main, name); err != nil {
			t.Fatal(err)
		}
		_, bm := mountStore(t, st, name, 0)
		for j := 0; j < 100; j++ {
			mnt := []string{mainMnt, bm}[j%2]
			for _, p := range []string{filepath.Join(mnt, "f"), filepath.Join(mnt, "d/x")} {
				// Each call on the inode the mount's lookup gave, through
				// /proc/self/fd/N of an O_PATH descriptor (a SETATTR
				// without a handle: node.Setattr), never following a
				// symlink itself: whatever reaches root's files is the
				// daemon's doing.
				if fd, err := open(p, unix.O_PATH); err == nil {
					pp := "/proc/self/fd/" + itoa(fd)
					if unix.Chmod(pp, 0o777) == nil {
						done++
					}
					unix.Chown(pp, attacktest.Nobody, attacktest.Nobody)
					unix.Truncate(pp, 1)
					unix.UtimesNano(pp, []unix.Timespec{{Sec: 1}, {Sec: 1}})
					unix.Setxattr(pp, "trusted.arbor-attack", []byte("1"), 0)
					unix.Removexattr(pp, "trusted.arbor-attack")
					unix.Close(fd)
				}
				if fd, err := open(p, unix.O_WRONLY); err == nil {
					done++
					unix.Write(fd, []byte("pwned"))
					unix.Fsync(fd)
					unix.Close(fd)
				}
				if fd, err := open(p, unix.O_RDONLY); err == nil {
					buf := make([]byte, 64)
					n, _ := unix.Read(fd, buf)
					unix.Close(fd)
					if strings.Contains(string(buf[:max(n, 0)]), "secret") {
						t.Fatalf("%s read the secret: %q", p, buf[:n])
					}
				}
			}
			if fd, err := open(filepath.Join(mnt, "d/new"), unix.O_CREAT|unix.O_WRONLY); err == nil {
				unix.Close(fd)
			}
			unix.Unlink(filepath.Join(mnt, "d/new"))
		}
		h.Check(t)
	}
	h.Check(t)
	if done == 0 {
		t.Fatal("no chmod and no open for writing went through: the test tried nothing")
	}
	t.Logf("%d chmods and opens for writing went through", done)
}
