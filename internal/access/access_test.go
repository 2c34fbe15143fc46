package access

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/testenv"
)

var (
	root   = Cred{UID: 0, GID: 0}
	nobody = Cred{UID: 65534, GID: 65534}
)

// sandbox is a world-searchable directory tree for one test, with the
// mounts it makes unmounted at the end.
type sandbox struct {
	t    testing.TB
	dir  string
	home string
}

func newSandbox(t testing.TB) *sandbox {
	t.Helper()
	testenv.NeedRoot(t, "to switch credentials and make bind mounts")
	dir, err := os.MkdirTemp("", "access-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &sandbox{t: t, dir: dir, home: filepath.Join(dir, "home")}
	s.mkdir("home", 0o700, 0)
	return s
}

func (s *sandbox) path(rel string) string { return filepath.Join(s.dir, rel) }

func (s *sandbox) mkdir(rel string, mode os.FileMode, uid int) string {
	s.t.Helper()
	p := s.path(rel)
	if err := os.Mkdir(p, mode); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		s.t.Fatal(err)
	}
	if err := os.Chown(p, uid, uid); err != nil {
		s.t.Fatal(err)
	}
	return p
}

func (s *sandbox) symlink(target, rel string) string {
	s.t.Helper()
	p := s.path(rel)
	if err := os.Symlink(target, p); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// mount mounts and registers the unmount of exactly that mount.
func (s *sandbox) mount(src, rel, fstype string, flags uintptr) string {
	s.t.Helper()
	p := s.path(rel)
	if err := unix.Mount(src, p, fstype, flags, ""); err != nil {
		s.t.Fatalf("mount %s on %s: %v", src, p, err)
	}
	s.t.Cleanup(func() {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			s.t.Errorf("unmount %s: %v", p, err)
		}
	})
	return p
}

func (s *sandbox) rules() *Rules {
	s.t.Helper()
	r, err := New(Config{Home: s.home})
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// want checks err against a rule ("" for success, "bad" for bad_request).
func want(t *testing.T, name string, d *Dir, err error, rule string) {
	t.Helper()
	if d != nil {
		defer d.Close()
	}
	var ref *Refusal
	switch {
	case rule == "":
		if err != nil {
			t.Errorf("%s: %v, want success", name, err)
		}
	case rule == "bad":
		if !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("%s: %v, want bad_request", name, err)
		}
	case !errors.As(err, &ref):
		t.Errorf("%s: %v, want a refusal by rule %q", name, err, rule)
	case ref.Rule != rule || !errors.Is(err, api.ErrForbidden) || api.Code(err) != api.CodeForbidden:
		t.Errorf("%s: %v (rule %q), want rule %q and code forbidden", name, err, ref.Rule, rule)
	}
}

func TestMountpoint(t *testing.T) {
	s := newSandbox(t)
	r := s.rules()
	s.mkdir("rootdir", 0o755, 0)
	s.mkdir("own", 0o755, 65534)
	s.mkdir("own/full", 0o755, 65534)
	if err := os.WriteFile(s.path("own/full/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.mkdir("own/empty", 0o755, 65534)
	s.mkdir("own/unlistable", 0o311, 65534)
	s.mkdir("private", 0o700, 0)
	s.mkdir("private/theirs", 0o755, 65534)
	s.symlink("/etc", "etclink")
	s.symlink(s.path("rootdir"), "rootlink")
	s.symlink(s.path("own/empty"), "ownlink")
	s.mkdir("bindetc", 0o755, 0)
	s.mount("/etc", "bindetc", "", unix.MS_BIND)
	s.mkdir("mq", 0o755, 0)
	s.mount("none", "mq", "mqueue", 0)
	s.mkdir("home/sub", 0o755, 0)
	s.mkdir("bindhome", 0o755, 0)
	s.mount(s.home, "bindhome", "", unix.MS_BIND)

	for _, c := range []struct {
		name string
		cred Cred
		path string
		rule string
	}{
		{"root inside a bind mount of the home", root, s.path("bindhome/sub"), RuleSystem},
		{"root creates inside a bind mount of the home", root, s.path("bindhome/new"), RuleSystem},
		{"root on /etc", root, "/etc", RuleSystem},
		{"root on /etc/", root, "/etc/", RuleSystem},
		{"root on /", root, "/", RuleSystem},
		{"root on /var (parent of /var/lib)", root, "/var", RuleSystem},
		{"root on /var/lib", root, "/var/lib", RuleSystem},
		{"root below /usr", root, "/usr/share", RuleSystem},
		{"root on /run", root, "/run", RuleSystem},
		{"root on /proc", root, "/proc", RuleSystem},
		{"root on /sys/kernel", root, "/sys/kernel", RuleSystem},
		{"root on the home", root, s.home, RuleSystem},
		{"root below the home", root, filepath.Join(s.home, "sub"), RuleSystem},
		{"root on a parent of the home", root, s.dir, RuleSystem},
		{"root through a symlink to /etc", root, s.path("etclink"), RuleSystem},
		{"root through .. to /etc", root, s.path("rootdir") + "/../etclink/../etc", RuleSystem},
		{"root on a bind mount of /etc", root, s.path("bindetc"), RuleSystem},
		{"root on an mqueue filesystem", root, s.path("mq"), RulePseudoFS},
		{"root on an empty root dir", root, s.path("rootdir"), ""},
		{"root on a non-empty dir", root, s.path("own/full"), RuleEmpty},
		{"nobody on a root-owned 0755 dir", nobody, s.path("rootdir"), RuleOwner},
		{"nobody through a symlink to a root dir", nobody, s.path("rootlink"), RuleOwner},
		{"nobody through .. to a root dir", nobody, s.path("own") + "/empty/../../rootdir", RuleOwner},
		{"nobody on /etc", nobody, "/etc", RuleSystem},
		{"nobody on /var/tmp", nobody, "/var/tmp", RuleOwner},
		{"nobody on its own empty dir", nobody, s.path("own/empty"), ""},
		{"nobody with a trailing slash", nobody, s.path("own/empty") + "/", ""},
		{"nobody through a symlink to its dir", nobody, s.path("ownlink"), ""},
		{"nobody on its own full dir", nobody, s.path("own/full"), RuleEmpty},
		{"nobody on its own unlistable dir", nobody, s.path("own/unlistable"), RuleEmpty},
		{"nobody in a dir it cannot search", nobody, s.path("private/theirs"), RuleReach},
		{"nobody creates below a root dir", nobody, s.path("rootdir/new"), RuleReach},
		{"root creates in /etc", root, "/etc/arbor-access-test-must-not-exist", RuleSystem},
		{"root creates through a symlink to /etc", root, s.path("etclink/arbor-access-test-must-not-exist"), RuleSystem},
		{"relative", root, "own/empty", "bad"},
		{"NUL", root, s.path("own/empty") + "\x00", "bad"},
		{"empty", root, "", "bad"},
		{"a file", root, s.path("own/full/f"), "bad"},
		{"create with ..", nobody, s.path("own") + "/x/../y", "bad"},
	} {
		d, err := r.Mountpoint(c.cred, c.path)
		want(t, c.name, d, err, c.rule)
	}
	for _, p := range []string{"/etc/arbor-access-test-must-not-exist", s.path("rootdir/new"), s.path("home/new")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused mountpoint was created: %s (%v)", p, err)
		}
	}
	// A missing mountpoint is created as the requester: theirs.
	d, err := r.Mountpoint(nobody, s.path("own/new/deeper"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Stat(s.path("own/new/deeper"), &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
		t.Errorf("created mountpoint: uid %d gid %d (%v), want 65534", st.Uid, st.Gid, err)
	}
	if d.Path != s.path("own/new/deeper") {
		t.Errorf("Dir.Path %s", d.Path)
	}
	// Dir.Path is canonical.
	d2, err := r.Mountpoint(nobody, s.path("ownlink"))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if d2.Path != s.path("own/empty") {
		t.Errorf("Dir.Path %s, want the symlink resolved", d2.Path)
	}
}

func TestBase(t *testing.T) {
	s := newSandbox(t)
	r := s.rules()
	s.mkdir("own", 0o755, 65534)
	s.mkdir("rootdir", 0o755, 0)
	s.mkdir("group", 0o770, 0)
	if err := os.Chown(s.path("group"), 0, 4242); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.mkdir("bindproc", 0o755, 0)
	s.mount("/proc", "bindproc", "", unix.MS_BIND)
	s.mkdir("bindsys", 0o755, 0)
	s.mount("/proc/sys", "bindsys", "", unix.MS_BIND)
	s.mkdir("mq", 0o777, 0)
	s.mount("none", "mq", "mqueue", 0)
	s.symlink("/proc/self", "proclink")
	s.symlink("/root", "rootlink")
	inGroup := Cred{UID: 65534, GID: 65534, Groups: []uint32{4242}}

	for _, c := range []struct {
		name string
		cred Cred
		path string
		rule string
	}{
		{"nobody on its own dir", nobody, s.path("own"), ""},
		{"nobody on a root 0755 dir", nobody, s.path("rootdir"), RuleReadWrite},
		{"nobody on /root", nobody, "/root", RuleReadWrite},
		{"nobody through a symlink to /root", nobody, s.path("rootlink"), RuleReadWrite},
		{"nobody on /etc", nobody, "/etc", RuleReadWrite},
		{"nobody in the group", inGroup, s.path("group"), ""},
		{"nobody not in the group", nobody, s.path("group"), RuleReadWrite},
		{"root on /proc", root, "/proc", RulePseudoFS},
		{"root on /proc/self", root, "/proc/self/", RulePseudoFS},
		{"root through a symlink into /proc", root, s.path("proclink"), RulePseudoFS},
		{"root on /sys/kernel", root, "/sys/kernel", RulePseudoFS},
		{"root on /dev", root, "/dev", RulePseudoFS},
		{"root on /dev/shm", root, "/dev/shm", RulePseudoFS},
		{"root on a bind mount of /proc", root, s.path("bindproc"), RulePseudoFS},
		{"root on a bind mount of /proc/sys", root, s.path("bindsys"), RulePseudoFS},
		{"root on an mqueue filesystem", root, s.path("mq"), RulePseudoFS},
		{"root on the home", root, s.home, RuleHome},
		{"root on a parent of the home", root, s.dir, RuleHome},
		{"root on a root dir", root, s.path("rootdir"), ""},
		{"a file", root, s.path("file"), "bad"},
		{"missing", root, s.path("missing"), "bad"},
		{"missing is not created", nobody, s.path("own/missing"), "bad"},
		{"relative", root, "own", "bad"},
	} {
		d, err := r.Base(c.cred, c.path)
		want(t, c.name, d, err, c.rule)
	}
	if _, err := os.Lstat(s.path("own/missing")); !errors.Is(err, os.ErrNotExist) {
		t.Error("Base created a missing base")
	}
}

// TestNotRoot: a daemon that is not root cannot take another uid's
// credentials, and says so instead of checking as itself.
func TestNotRoot(t *testing.T) {
	s := newSandbox(t)
	r := s.rules()
	r.self = Cred{UID: 1000, GID: 1000}
	s.mkdir("own", 0o755, 65534)
	d, err := r.Base(nobody, s.path("own"))
	want(t, "other uid", d, err, RuleCreds)
}

// TestCredentialsDoNotLeak: after checks as nobody, every goroutine still
// has the daemon's own filesystem credentials.
func TestCredentialsDoNotLeak(t *testing.T) {
	s := newSandbox(t)
	r := s.rules()
	s.mkdir("own", 0o755, 65534)
	secret := s.path("secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if d, err := r.Base(nobody, s.path("own")); err != nil {
					t.Error(err)
				} else {
					d.Close()
				}
				if uid, _ := unix.SetfsuidRetUid(-1); uid != 0 {
					t.Errorf("fsuid %d on a daemon goroutine", uid)
				}
				if _, err := os.ReadFile(secret); err != nil {
					t.Errorf("the daemon lost access: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkBase: one base check as the daemon itself and as another uid
// (which takes a fresh thread with that uid's filesystem credentials).
func BenchmarkBase(b *testing.B) {
	s := newSandbox(b)
	r := s.rules()
	s.mkdir("own", 0o755, 65534)
	for _, c := range []struct {
		name string
		cred Cred
	}{{"self", Self()}, {"other-uid", nobody}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				d, err := r.Base(c.cred, s.path("own"))
				if err != nil {
					b.Fatal(err)
				}
				d.Close()
			}
		})
	}
}
