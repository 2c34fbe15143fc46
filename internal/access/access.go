package access

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
)

// The rules a Refusal names.
const (
	RuleCreds     = "credentials" // the daemon cannot take the requester's credentials
	RuleReach     = "reach"       // the requester cannot reach or create the path
	RuleSystem    = "system"      // a system directory, a parent of one, or the daemon's home
	RulePseudoFS  = "pseudo-fs"   // /proc, /sys, /dev or a pseudo filesystem by type
	RuleOwner     = "owner"       // a mountpoint the requester does not own
	RuleEmpty     = "empty"       // a mountpoint that is not an empty directory
	RuleHome      = "home"        // a base inside the daemon's home or containing it
	RuleReadWrite = "read-write"  // a base the requester could not read and write
)

// Refusal is a path a rule refused. It wraps api.ErrForbidden.
type Refusal struct {
	What string // "mountpoint" or "base"
	Path string // as given
	Real string // the canonical path, once resolved
	Rule string
	Why  string
	Cred Cred
}

func (e *Refusal) Error() string {
	p := e.Path
	if e.Real != "" && e.Real != e.Path {
		p = fmt.Sprintf("%s (%s)", e.Path, e.Real)
	}
	return fmt.Sprintf("%s %s refused for %s by rule %q: %s", e.What, p, e.Cred, e.Rule, e.Why)
}

// Unwrap makes errors.Is(err, api.ErrForbidden) hold.
func (e *Refusal) Unwrap() error { return api.ErrForbidden }

var errNotRoot = errors.New("the daemon does not run as root and checks paths only for its own uid")

// Config configures New.
type Config struct {
	// Home is the daemon's state directory: never a mountpoint nor below
	// one, never inside or around a base. Required.
	Home string
}

// Rules checks paths; it is safe for concurrent use.
type Rules struct {
	home string // canonical
	self Cred
	// sysTrees may hold no mount anywhere in or below them; sysDirs (which
	// include sysTrees and home) may not be mounted on, nor any parent of
	// them. Both by canonical name; sysIDs are their identities and their
	// parents' (a bind mount of /etc elsewhere is still /etc).
	sysTrees, sysDirs, pseudoTrees []string
	sysIDs, pseudoIDs              map[fileID]string
	treeIDs                        map[fileID]string // the roots of sysTrees and the home
}

type fileID struct{ dev, ino uint64 }

// systemTrees are refused as mountpoints with everything below them;
// systemDirs only themselves (and their parents).
var (
	systemTrees = []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev", "/proc", "/sys"}
	systemDirs  = []string{"/run", "/var/lib"}
	pseudoDirs  = []string{"/proc", "/sys", "/dev"}
)

// New returns the rules for a daemon whose home is cfg.Home.
func New(cfg Config) (*Rules, error) {
	if cfg.Home == "" || !filepath.IsAbs(cfg.Home) {
		return nil, api.Errorf(api.ErrBadRequest, "access: Home %q must be an absolute path", cfg.Home)
	}
	r := &Rules{home: canonical(cfg.Home), self: Self(), sysIDs: map[fileID]string{}, pseudoIDs: map[fileID]string{}, treeIDs: map[fileID]string{}}
	trees := append([]string{}, systemTrees...)
	if more, err := filepath.Glob("/lib*"); err == nil {
		trees = append(trees, more...)
	}
	add := func(list *[]string, ids map[fileID]string, p string, parents bool) {
		for _, q := range []string{filepath.Clean(p), canonical(p)} {
			*list = append(*list, q)
			for {
				if id, ok := identity(q); ok {
					if _, seen := ids[id]; !seen {
						ids[id] = q
					}
				}
				if !parents || q == "/" {
					break
				}
				q = filepath.Dir(q)
			}
		}
	}
	for _, p := range trees {
		add(&r.sysTrees, r.sysIDs, p, true)
	}
	for _, p := range append(trees, r.home) {
		if id, ok := identity(p); ok {
			r.treeIDs[id] = p
		}
	}
	r.sysDirs = append(r.sysDirs, r.sysTrees...)
	for _, p := range append(append([]string{}, systemDirs...), r.home, cfg.Home) {
		add(&r.sysDirs, r.sysIDs, p, true)
	}
	for _, p := range pseudoDirs {
		add(&r.pseudoTrees, r.pseudoIDs, p, false)
	}
	return r, nil
}

// prospective is the canonical name p would have if created now (its
// deepest existing ancestor resolved, and the rest as given) and that
// ancestor.
func prospective(p string) (future, parent string) {
	p = filepath.Clean(p)
	rest := ""
	for q := p; ; q = filepath.Dir(q) {
		if _, err := os.Stat(q); err == nil || q == "/" {
			return filepath.Join(canonical(q), rest), q
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
}

// underTree reports whether the directory at fd is a system tree (or the
// home) or inside one by identity, walking up by "..": a directory inside a
// bind mount of /etc reaches the mount's root, which is /etc, whatever the
// names on the way.
func (r *Rules) underTree(fd int) (string, bool) {
	cur, err := unix.Dup(fd)
	if err != nil {
		return "", false
	}
	defer func() { unix.Close(cur) }()
	var prev fileID
	for range 4096 {
		var st unix.Stat_t
		if unix.Fstat(cur, &st) != nil {
			return "", false
		}
		id := fileID{uint64(st.Dev), st.Ino}
		if s, ok := r.treeIDs[id]; ok {
			return s, true
		}
		if id == prev { // the root: its .. is itself
			return "", false
		}
		prev = id
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", false
		}
		unix.Close(cur)
		cur = up
	}
	return "", false
}

// canonical resolves symlinks in p where it exists.
func canonical(p string) string {
	if c, err := filepath.EvalSymlinks(p); err == nil {
		return c
	}
	return filepath.Clean(p)
}

func identity(p string) (fileID, bool) {
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

// Dir is a checked directory: an O_PATH descriptor of it and its canonical
// path when it was checked.
type Dir struct {
	Path string
	f    *os.File
}

// File is the O_PATH descriptor of the directory (owned by the Dir).
func (d *Dir) File() *os.File { return d.f }

// Close closes the descriptor.
func (d *Dir) Close() error { return d.f.Close() }

// checkSyntax refuses what is not an absolute path.
func checkSyntax(what, p string) error {
	if p == "" {
		return api.Errorf(api.ErrBadRequest, "%s: empty path", what)
	}
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return api.Errorf(api.ErrBadRequest, "%s %q must be an absolute path", what, p)
	}
	return nil
}

// Mountpoint checks that c may mount on p, creating p (as c) if it is
// missing. The caller closes the Dir.
func (r *Rules) Mountpoint(c Cred, p string) (*Dir, error) {
	const what = "mountpoint"
	if err := checkSyntax(what, p); err != nil {
		return nil, err
	}
	// A missing mountpoint is created: check its future name first, so
	// that a refused one is not made.
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		if slices.Contains(strings.Split(p, "/"), "..") {
			// Lexical cleaning would guess the name wrong across a symlink.
			return nil, api.Errorf(api.ErrBadRequest, "mountpoint %s does not exist, and one to create must be named without ..", p)
		}
		future, parent := prospective(p)
		for _, s := range append(append([]string{}, r.sysTrees...), r.home) {
			if inside(future, s) {
				return nil, &Refusal{What: what, Path: p, Real: future, Rule: RuleSystem, Why: fmt.Sprintf("it would be inside %s (a system directory or the daemon's home)", s), Cred: c}
			}
		}
		if fd, err := unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			s, under := r.underTree(fd)
			unix.Close(fd)
			if under {
				return nil, &Refusal{What: what, Path: p, Real: future, Rule: RuleSystem, Why: fmt.Sprintf("it would be inside %s (reached through a mount of it)", s), Cred: c}
			}
		}
	}
	var empty bool
	var emptyErr error
	d, st, err := r.open(c, what, p, true, func(fd int) error {
		empty, emptyErr = isEmpty(fd)
		return nil
	})
	if err != nil {
		return nil, err
	}
	refuse := func(rule, why string, args ...any) (*Dir, error) {
		d.Close()
		return nil, &Refusal{What: what, Path: p, Real: d.Path, Rule: rule, Why: fmt.Sprintf(why, args...), Cred: c}
	}
	id := fileID{uint64(st.Dev), st.Ino}
	for _, s := range r.sysTrees {
		if inside(d.Path, s) {
			return refuse(RuleSystem, "%s is a system directory", s)
		}
	}
	for _, s := range r.sysDirs {
		if inside(s, d.Path) {
			if s == d.Path {
				return refuse(RuleSystem, "%s is a system directory (or the daemon's home)", s)
			}
			return refuse(RuleSystem, "it holds the system directory %s (or the daemon's home)", s)
		}
	}
	if inside(d.Path, r.home) {
		return refuse(RuleSystem, "it is inside the daemon's home %s", r.home)
	}
	if s, ok := r.sysIDs[id]; ok {
		return refuse(RuleSystem, "it is the system directory %s (or a parent of one)", s)
	}
	if s, under := r.underTree(int(d.f.Fd())); under {
		return refuse(RuleSystem, "it is inside %s (reached through a mount of it)", s)
	}
	if name, bad := pseudoFS(d.f); bad {
		return refuse(RulePseudoFS, "it is on a %s filesystem", name)
	}
	if c.UID != 0 && st.Uid != c.UID {
		return refuse(RuleOwner, "it is owned by uid %d, not by the requester", st.Uid)
	}
	if emptyErr != nil {
		return refuse(RuleEmpty, "the requester cannot list it: %v", emptyErr)
	}
	if !empty {
		return refuse(RuleEmpty, "it is not empty")
	}
	return d, nil
}

// Base checks that c may use p as a base directory. The caller closes the Dir.
func (r *Rules) Base(c Cred, p string) (*Dir, error) {
	const what = "base"
	if err := checkSyntax(what, p); err != nil {
		return nil, err
	}
	var rwErr error
	d, st, err := r.open(c, what, p, false, func(fd int) error {
		rwErr = unix.Faccessat2(fd, "", unix.R_OK|unix.W_OK|unix.X_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH)
		return nil
	})
	if err != nil {
		return nil, err
	}
	refuse := func(rule, why string, args ...any) (*Dir, error) {
		d.Close()
		return nil, &Refusal{What: what, Path: p, Real: d.Path, Rule: rule, Why: fmt.Sprintf(why, args...), Cred: c}
	}
	for _, s := range r.pseudoTrees {
		if inside(d.Path, s) {
			return refuse(RulePseudoFS, "it is in %s", s)
		}
	}
	if s, ok := r.pseudoIDs[fileID{uint64(st.Dev), st.Ino}]; ok {
		return refuse(RulePseudoFS, "it is %s", s)
	}
	if name, bad := pseudoFS(d.f); bad {
		return refuse(RulePseudoFS, "it is on a %s filesystem", name)
	}
	if inside(d.Path, r.home) || inside(r.home, d.Path) {
		return refuse(RuleHome, "it and the daemon's home %s must not contain each other", r.home)
	}
	if rwErr != nil {
		return refuse(RuleReadWrite, "the requester could not read, write and search it: %v", rwErr)
	}
	return d, nil
}

// open resolves and opens p as c (creating it first if create and it is
// missing), runs check on the descriptor as c, and returns the Dir with its
// canonical path and stat. The canonical path is re-opened without
// following any symlink and must be the same directory.
func (r *Rules) open(c Cred, what, p string, create bool, check func(fd int) error) (*Dir, *unix.Stat_t, error) {
	fd := -1
	var openErr error
	err := r.as(c, func() error {
		fd, openErr = unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(openErr, unix.ENOENT) && create {
			if err := os.MkdirAll(p, 0o755); err != nil {
				openErr = err
				return nil
			}
			fd, openErr = unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		if openErr != nil {
			return nil
		}
		return check(fd)
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		if errors.Is(err, errNotRoot) {
			return nil, nil, &Refusal{What: what, Path: p, Rule: RuleCreds, Why: err.Error(), Cred: c}
		}
		return nil, nil, fmt.Errorf("%s %s: checking as %s: %w: %w", what, p, c, api.ErrInternal, err)
	}
	if openErr != nil {
		switch {
		case errors.Is(openErr, unix.EACCES), errors.Is(openErr, unix.EPERM), errors.Is(openErr, unix.EROFS):
			return nil, nil, &Refusal{What: what, Path: p, Rule: RuleReach, Why: openErr.Error(), Cred: c}
		case errors.Is(openErr, unix.ENOENT), errors.Is(openErr, unix.ENOTDIR), errors.Is(openErr, unix.ELOOP),
			errors.Is(openErr, unix.ENAMETOOLONG), errors.Is(openErr, unix.EEXIST):
			return nil, nil, api.Errorf(api.ErrBadRequest, "%s %s is not a directory: %v", what, p, openErr)
		}
		return nil, nil, fmt.Errorf("%s %s: %w: %w", what, p, api.ErrInternal, openErr)
	}
	d := &Dir{f: os.NewFile(uintptr(fd), p)}
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("%s %s: resolving: %w: %w", what, p, api.ErrInternal, err)
	}
	d.Path = real
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("%s %s: %w: %w", what, p, api.ErrInternal, err)
	}
	// The canonical name must lead to the same directory with no symlink
	// followed (a directory moved meanwhile, or one not reachable by name
	// from here, such as a deleted one, fails this).
	same := false
	if filepath.IsAbs(real) {
		if fd2, err := unix.Openat2(unix.AT_FDCWD, real, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		}); err == nil {
			var st2 unix.Stat_t
			same = unix.Fstat(fd2, &st2) == nil && st2.Dev == st.Dev && st2.Ino == st.Ino
			unix.Close(fd2)
		}
	}
	if !same {
		d.Close()
		return nil, nil, &Refusal{What: what, Path: p, Real: real, Rule: RuleReach, Why: "the directory has no stable name (moved or deleted while checked)", Cred: c}
	}
	return d, &st, nil
}

// isEmpty reports whether the directory at the O_PATH descriptor fd has no
// entries but . and ..; it opens the directory for reading (as the caller).
func isEmpty(fd int) (bool, error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(dfd)
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(dfd, buf)
		if err != nil {
			return false, err
		}
		if n == 0 {
			return true, nil
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		if len(names) > 0 { // ParseDirent skips . and ..
			return false, nil
		}
	}
}

// Pseudo filesystems by statfs type: kernel interfaces, not storage. A
// tmpfs or ramfs is storage and allowed; devtmpfs reports tmpfs's type,
// which is why /dev is also refused by name.
var pseudoTypes = map[int64]string{
	unix.PROC_SUPER_MAGIC: "proc", unix.SYSFS_MAGIC: "sysfs", unix.DEVPTS_SUPER_MAGIC: "devpts",
	unix.CGROUP_SUPER_MAGIC: "cgroup", unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.DEBUGFS_MAGIC: "debugfs",
	unix.TRACEFS_MAGIC: "tracefs", unix.SECURITYFS_MAGIC: "securityfs", unix.BPF_FS_MAGIC: "bpf",
	unix.PSTOREFS_MAGIC: "pstore", unix.EFIVARFS_MAGIC: "efivarfs", unix.SELINUX_MAGIC: "selinuxfs",
	unix.SMACK_MAGIC: "smackfs", unix.BINFMTFS_MAGIC: "binfmt_misc", unix.NSFS_MAGIC: "nsfs",
	unix.AUTOFS_SUPER_MAGIC: "autofs", unix.RDTGROUP_SUPER_MAGIC: "resctrl", unix.HUGETLBFS_MAGIC: "hugetlbfs",
	unix.DEVMEM_MAGIC: "devmem", unix.SOCKFS_MAGIC: "sockfs", unix.PIPEFS_MAGIC: "pipefs",
	0x65735543: "fusectl", 0x62656570: "configfs", 0x19800202: "mqueue",
}

// pseudoFS reports the type name of f's filesystem if it is a pseudo one.
func pseudoFS(f *os.File) (string, bool) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return "unknown (" + err.Error() + ")", true
	}
	name, bad := pseudoTypes[int64(sfs.Type)]
	return name, bad
}

// inside reports whether p is dir or below it (both clean and absolute).
func inside(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}
