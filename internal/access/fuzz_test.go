package access

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/arbor-dev/arbor/api"
)

// maze is a sandbox of directories, symlinks and mounts that the fuzz and
// property tests walk through. Nothing in it lets uid 65534 create a
// directory outside it (no symlink to / or to a world-writable place).
type maze struct {
	*sandbox
	r *Rules
}

func newMaze(t testing.TB) *maze {
	s := newSandbox(t)
	s.mkdir("own", 0o755, 65534)
	s.mkdir("own/empty", 0o755, 65534)
	s.mkdir("own/full", 0o755, 65534)
	if err := os.WriteFile(s.path("own/full/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.mkdir("own/\xff\xfe", 0o755, 65534)
	s.mkdir("rootdir", 0o755, 0)
	s.mkdir("world", 0o777, 0)
	s.mkdir("private", 0o700, 0)
	s.mkdir("private/theirs", 0o755, 65534)
	s.mkdir("grp", 0o770, 0)
	s.symlink("/etc", "l_etc")
	s.symlink("/proc/self", "l_proc")
	s.symlink(s.path("rootdir"), "l_root")
	s.symlink(s.path("own/empty"), "l_own")
	s.symlink("own", "l_rel")
	s.symlink("l_loop", "l_loop")
	s.symlink("home", "l_home")
	s.mkdir("bind_etc", 0o755, 0)
	s.mount("/etc", "bind_etc", "", unix.MS_BIND|unix.MS_RDONLY)
	s.mkdir("bind_proc", 0o755, 0)
	s.mount("/proc", "bind_proc", "", unix.MS_BIND)
	s.mkdir("bind_own", 0o755, 0) // a root-owned directory covered by uid 65534's own
	s.mount(s.path("own/empty"), "bind_own", "", unix.MS_BIND)
	s.mkdir("mq", 0o755, 0)
	s.mount("none", "mq", "mqueue", 0)
	return &maze{sandbox: s, r: s.rules()}
}

var components = []string{"own", "empty", "full", "\xff\xfe", "rootdir", "world", "private", "theirs", "grp",
	"l_etc", "l_proc", "l_root", "l_own", "l_rel", "l_loop", "l_home", "home", "bind_etc", "bind_proc", "bind_own",
	"mq", "f", ".", "..", "", "new", "x\xc3\x28", "ssh", "self"}

// oracle checks, independently of the package (mode bits, names, statfs),
// that an accepted path is one the rules accept. It reports the first rule
// the path breaks, or "".
func (mz *maze) oracle(c Cred, what, p string, d *Dir) string {
	var st, lst unix.Stat_t
	if unix.Stat(p, &st) != nil || unix.Lstat(d.Path, &lst) != nil {
		return "the path does not resolve"
	}
	if lst.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != lst.Dev || st.Ino != lst.Ino {
		return "Dir.Path is not the directory the path names"
	}
	if ev, err := filepath.EvalSymlinks(d.Path); err != nil || ev != d.Path {
		return "Dir.Path is not canonical"
	}
	var fst unix.Stat_t
	if unix.Fstat(int(d.File().Fd()), &fst) != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
		return "the descriptor is another directory"
	}
	// Every ancestor searchable by the requester, by mode bits.
	may := func(st *unix.Stat_t, bits uint32) bool {
		if c.UID == 0 {
			return true
		}
		switch {
		case st.Uid == c.UID:
			return st.Mode>>6&bits == bits
		case st.Gid == c.GID:
			return st.Mode>>3&bits == bits
		}
		for _, g := range c.Groups {
			if st.Gid == g {
				return st.Mode>>3&bits == bits
			}
		}
		return st.Mode&bits == bits
	}
	for q := filepath.Dir(d.Path); ; q = filepath.Dir(q) {
		var ast unix.Stat_t
		if unix.Stat(q, &ast) != nil || !may(&ast, 1) {
			return "an ancestor the requester cannot search"
		}
		if q == "/" {
			break
		}
	}
	var sfs unix.Statfs_t
	unix.Statfs(d.Path, &sfs)
	switch sfs.Type {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, 0x19800202, unix.CGROUP2_SUPER_MAGIC:
		return "a pseudo filesystem"
	}
	home := mz.home
	if inside(d.Path, home) || inside(home, d.Path) {
		return "the home"
	}
	for _, s := range []string{"/proc", "/sys", "/dev"} {
		if inside(d.Path, s) {
			return "in " + s
		}
	}
	var etc unix.Stat_t
	unix.Stat("/etc", &etc)
	if what == "mountpoint" {
		for _, s := range []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/boot"} {
			if inside(d.Path, s) {
				return "a system directory"
			}
		}
		for _, s := range []string{"/run", "/var/lib", "/var", "/"} {
			if d.Path == s {
				return "a system directory"
			}
		}
		if st.Dev == etc.Dev && st.Ino == etc.Ino {
			return "/etc by identity"
		}
		if c.UID != 0 && st.Uid != c.UID {
			return "not the requester's"
		}
		if ents, err := os.ReadDir(d.Path); err != nil || len(ents) > 0 {
			return "not empty"
		}
		return ""
	}
	if !may(&st, 7) {
		return "not read-write-search for the requester"
	}
	return ""
}

// try runs one check and fails t on a verdict the oracle rejects.
func (mz *maze) try(t interface {
	Helper()
	Fatalf(string, ...any)
}, c Cred, what, p string) {
	t.Helper()
	var d *Dir
	var err error
	if what == "mountpoint" {
		d, err = mz.r.Mountpoint(c, p)
	} else {
		d, err = mz.r.Base(c, p)
	}
	if err != nil {
		var ref *Refusal
		if !errors.Is(err, api.ErrBadRequest) && !errors.As(err, &ref) {
			t.Fatalf("%s %q as %s: %v, want bad_request or a refusal", what, p, c, err)
		}
		if errors.As(err, &ref) && api.Code(err) != api.CodeForbidden {
			t.Fatalf("%s %q: refusal with code %s", what, p, api.Code(err))
		}
		return
	}
	defer d.Close()
	if why := mz.oracle(c, what, p, d); why != "" {
		t.Fatalf("%s %q as %s accepted (Dir.Path %q) but: %s", what, p, c, d.Path, why)
	}
}

// cleanCreated removes what mountpoint checks created, so runs stay alike.
func (mz *maze) cleanCreated() {
	keep := map[string]bool{"empty": true, "full": true, "\xff\xfe": true}
	for _, d := range []string{"own", "own/empty", "own/\xff\xfe", "world"} {
		ents, _ := os.ReadDir(mz.path(d))
		for _, e := range ents {
			if d != "own" || !keep[e.Name()] {
				os.RemoveAll(filepath.Join(mz.path(d), e.Name()))
			}
		}
	}
}

// TestRulesProperty: random paths made of the maze's names, "." and "..",
// empty components (//), trailing slashes, non-UTF-8 bytes, relative forms
// and loops never pass a check that the oracle says they should fail, for
// uid 65534 (with and without a supplementary group) and root.
func TestRulesProperty(t *testing.T) {
	mz := newMaze(t)
	grp := Cred{UID: 65534, GID: 65534, Groups: []uint32{0}}
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 6).Draw(rt, "n")
		parts := make([]string, n)
		for i := range parts {
			parts[i] = rapid.SampledFrom(components).Draw(rt, "part")
		}
		p := strings.Join(parts, "/")
		switch rapid.IntRange(0, 9).Draw(rt, "form") {
		case 0: // relative
		case 1:
			p = mz.dir + "/" + p + "/"
		default:
			p = mz.dir + "/" + p
		}
		cred := rapid.SampledFrom([]Cred{nobody, grp, root}).Draw(rt, "cred")
		what := rapid.SampledFrom([]string{"base", "mountpoint"}).Draw(rt, "what")
		if what == "mountpoint" && cred.UID == 0 && strings.Contains(p, "bind_etc") {
			// Root may create directories; not through a bind of the real /etc.
			what = "base"
		}
		mz.try(rt, cred, what, p)
		mz.cleanCreated()
	})
}

// FuzzMountpoint: arbitrary bytes below the maze, as a mountpoint and a
// base for uid 65534, and as a base for root; and arbitrary absolute paths
// as a base (which is never created).
func FuzzMountpoint(f *testing.F) {
	for _, s := range []string{"own/empty", "rootdir", "l_etc", "l_root/", "own/../rootdir", "own//empty/",
		"own/\xff\xfe", "bind_own", "bind_etc/ssh", "mq", "l_proc/fd", "l_loop", "l_rel/empty", "../..", "own/new/x",
		"/etc", "/proc/self", "/root", "/dev/shm", "/tmp"} {
		f.Add(s)
	}
	mz := newMaze(f)
	f.Fuzz(func(t *testing.T, s string) {
		if strings.HasPrefix(s, "/") {
			mz.try(t, nobody, "base", s)
			mz.try(t, root, "base", s)
			return
		}
		p := mz.dir + "/" + s
		mz.try(t, nobody, "mountpoint", p)
		mz.try(t, nobody, "base", p)
		mz.try(t, root, "base", p)
		mz.cleanCreated()
	})
}
