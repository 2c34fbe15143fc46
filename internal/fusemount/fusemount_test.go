package fusemount

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParse(t *testing.T) {
	const info = `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
120 36 0:52 / /tmp/a\040b\134c\011d rw,nosuid,nodev,relatime shared:7 - fuse.branchfs /srv/my\040repo rw,user_id=0,group_id=0,default_permissions,allow_other
121 36 0:53 / /sys/fs/fuse/connections rw,nosuid,nodev,noexec,relatime - fusectl fusectl rw
`
	ms, err := Parse(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("%d mounts, want 3", len(ms))
	}
	m := ms[1]
	if m.Point != "/tmp/a b\\c\td" || m.Source != "/srv/my repo" || m.FSType != "fuse.branchfs" || !m.IsFUSE() {
		t.Errorf("escaped mount: %+v", m)
	}
	if m.ID != 120 || m.Parent != 36 || m.Conn() != 52 {
		t.Errorf("ids: %+v conn %d", m, m.Conn())
	}
	if ms[0].IsFUSE() || ms[2].IsFUSE() || ms[0].Conn() != 98<<20 {
		t.Errorf("non-FUSE mounts: %+v", ms)
	}
	if !strings.Contains(ms[1].Options, "default_permissions") || !strings.HasPrefix(ms[1].Options, "rw,nosuid") {
		t.Errorf("options %q", ms[1].Options)
	}
	if ms[0].SuperOptions != "rw,errors=continue" || ms[2].SuperOptions != "rw" {
		t.Errorf("superblock options %q, %q", ms[0].SuperOptions, ms[2].SuperOptions)
	}
	for _, bad := range []string{"36 35 98:0 /mnt1 /mnt2 rw", "x 35 98:0 / / rw - ext4 /dev/x rw", "1 2 98-0 / / rw - ext4 /dev/x rw"} {
		if _, err := Parse(strings.NewReader(bad + "\n")); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`a\040b`: "a b", `\134`: `\`, `a\09`: `a\09`, `tail\04`: `tail\04`, `x`: "x", `\012`: "\n"} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
	}{{"/a/b", "/a", true}, {"/a", "/a", true}, {"/ab", "/a", false}, {"/a/b", "/", true}, {"/a", "/a/", true}} {
		if got := Within(c.p, c.dir); got != c.want {
			t.Errorf("Within(%q, %q) = %v", c.p, c.dir, got)
		}
	}
}

// TestFindSpace: a real mount at a path with a space is found (the kernel
// escapes it as \040).
func TestFindSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mp := filepath.Join(t.TempDir(), "with space")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mp, unix.MNT_DETACH)
	m, ok := Find(mp)
	if !ok || m.FSType != "tmpfs" {
		t.Fatalf("Find(%q) = %+v, %v", mp, m, ok)
	}
	if got := Under(filepath.Dir(mp)); len(got) != 1 || got[0].Point != mp {
		t.Fatalf("Under: %+v", got)
	}
	if err := Detach(mp); err != nil {
		t.Fatal(err)
	}
	if _, ok := Find(mp); ok {
		t.Fatal("still mounted after Detach")
	}
}

// TestWaitAndOf: Wait returns once a mount shows at its point, fails at
// once when the server exits first, and Of finds the mount that holds a
// path below a mountpoint.
func TestWaitAndOf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mp := filepath.Join(t.TempDir(), "m")
	os.Mkdir(mp, 0o755)
	exited := make(chan struct{})
	close(exited)
	if err := Wait(t.Context(), mp, 5*time.Second, exited); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("Wait with the server gone: %v", err)
	}
	if err := Wait(t.Context(), mp, 20*time.Millisecond, nil); err == nil {
		t.Error("Wait with nothing mounted returned no error")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m")
	}()
	t.Cleanup(func() { unix.Unmount(mp, unix.MNT_DETACH) })
	if err := Wait(t.Context(), mp, 10*time.Second, nil); err != nil {
		t.Fatalf("Wait for a tmpfs: %v", err)
	}
	if m, ok := Of(filepath.Join(mp, "deeper", "path")); !ok || m.Point != mp || m.FSType != "tmpfs" {
		t.Errorf("Of below the tmpfs: %+v, %v", m, ok)
	}
}
