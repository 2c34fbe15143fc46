package nodefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/store"
)

// Root is a host directory shown at Prefix ("/", "/workspace", "/tmp").
type Root struct {
	Prefix string
	Dir    string
}

// FS is a node's files over its roots. It holds no descriptor: each call
// opens its root afresh.
type FS struct {
	roots []Root
}

// MaxList bounds the entries of one List.
const MaxList = 100_000

// removeBatch is how many names a recursive remove reads from a directory
// before it removes them and reads on.
const removeBatch = 256

// New returns the FS over roots; the first is where a path under no
// root's prefix goes.
func New(roots ...Root) (*FS, error) {
	if len(roots) == 0 {
		return nil, fmt.Errorf("nodefs: no root")
	}
	for i, r := range roots {
		if !path.IsAbs(r.Prefix) || path.Clean(r.Prefix) != r.Prefix || r.Dir == "" {
			return nil, fmt.Errorf("nodefs: root %q at %q: want a clean absolute prefix and a directory", r.Dir, r.Prefix)
		}
		roots[i] = r
	}
	return &FS{roots: roots}, nil
}

// resolve is how openat2 walks every path: inside the root, as a chroot
// would, with no magic link and no other mount.
const resolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// where finds p's root and its path relative to that root ("" for the root
// itself), lexically cleaned (".." that would climb past "/" stays at "/";
// openat2 keeps whatever a symlink adds inside the root).
func (fs *FS) where(p string) (Root, string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return Root{}, "", api.Errorf(api.ErrBadRequest, "path %q has a NUL byte", p)
	}
	clean := path.Clean("/" + p)
	for _, r := range fs.roots {
		if r.Prefix == "/" {
			continue
		}
		if clean == r.Prefix || strings.HasPrefix(clean, r.Prefix+"/") {
			return r, strings.TrimPrefix(strings.TrimPrefix(clean, r.Prefix), "/"), nil
		}
	}
	return fs.roots[0], strings.TrimPrefix(clean, "/"), nil
}

// openRoot opens r's directory (O_PATH).
func openRoot(r Root) (int, error) {
	fd, err := unix.Open(r.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: the node's %s (%s): %w", api.ErrInternal, r.Prefix, r.Dir, err)
	}
	return fd, nil
}

func openIn(root int, rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// open opens p with flags, following symlinks inside its root.
func (fs *FS) open(p string, flags int) (*os.File, error) {
	r, rel, err := fs.where(p)
	if err != nil {
		return nil, err
	}
	root, err := openRoot(r)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := openIn(root, rel, flags, 0)
	if err != nil {
		return nil, pathError(p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// parent opens p's parent directory and returns it with p's last name.
// The root itself has no name in its parent: it is a bad request.
func (fs *FS) parent(p string) (*os.File, string, error) {
	r, rel, err := fs.where(p)
	if err != nil {
		return nil, "", err
	}
	if rel == "" {
		return nil, "", api.Errorf(api.ErrBadRequest, "%q is the node's %s itself", p, r.Prefix)
	}
	dir, name := path.Split(rel)
	root, err := openRoot(r)
	if err != nil {
		return nil, "", err
	}
	defer unix.Close(root)
	fd, err := openIn(root, strings.TrimSuffix(dir, "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, "", pathError(path.Dir("/"+rel), err)
	}
	return os.NewFile(uintptr(fd), dir), name, nil
}

// Open opens p, a regular file, for reading, and describes it.
func (fs *FS) Open(ctx context.Context, p string) (io.ReadCloser, api.FileInfo, error) {
	f, err := fs.open(p, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, api.FileInfo{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, api.FileInfo{}, pathError(p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, api.FileInfo{}, api.Errorf(api.ErrBadRequest, "read %s: not a regular file (%s)", p, fileType(st.Mode))
	}
	// O_NONBLOCK only kept a FIFO from hanging the open; a regular file
	// ignores it.
	return f, info(path.Base("/"+p), p, &st, ""), nil
}

var tmpSeq atomic.Uint64

// Write writes p atomically: r's data goes to a new file beside p, made
// with mode (0: 0644), which is renamed over p once r is at its end. If
// r fails, or ctx ends, p is left as it was. A directory at p is refused.
func (fs *FS) Write(ctx context.Context, p string, mode uint32, r io.Reader) (api.FileInfo, error) {
	if mode == 0 {
		mode = 0o644
	}
	if mode > 0o7777 {
		return api.FileInfo{}, api.Errorf(api.ErrBadRequest, "write %s: mode %o is not a permission mode", p, mode)
	}
	dir, name, err := fs.parent(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return api.FileInfo{}, api.Errorf(api.ErrBadRequest, "write %s: a directory is there", p)
	}
	// A daemon killed meanwhile leaves nothing behind: ctx's journal
	// names the temporary until it is gone (Journal.Reap at the next
	// start), and the store drops the name from its layers at Open.
	tmp := fmt.Sprintf("%s%d-%d", store.TempPrefix, os.Getpid(), tmpSeq.Add(1))
	where, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", dfd))
	if err != nil {
		return api.FileInfo{}, fmt.Errorf("write %s: %w: %w", p, api.ErrInternal, err)
	}
	forget, err := record(ctx, filepath.Join(where, tmp))
	if err != nil {
		return api.FileInfo{}, fmt.Errorf("write %s: %w: %w", p, api.ErrInternal, err)
	}
	defer forget() // after the deferred unlink below
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	done := false
	defer func() {
		if !done {
			f.Close()
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
		if pe := (*os.PathError)(nil); errors.As(err, &pe) {
			return api.FileInfo{}, pathError(p, pe.Err)
		}
		return api.FileInfo{}, fmt.Errorf("write %s: %w", p, err)
	}
	if err := chown(ctx, fd); err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	// After the chown, which clears setuid and setgid bits.
	if err := unix.Fchmod(fd, mode); err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	if err := f.Close(); err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	done = true // closed: from here only the name is left to undo
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return api.FileInfo{}, pathError(p, err)
	}
	return info(name, p, &st, ""), nil
}

// ctxReader ends a copy when ctx does.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// Stat describes p; a symlink at p is described, not followed (its
// parents are followed inside the root).
func (fs *FS) Stat(ctx context.Context, p string) (api.FileInfo, error) {
	r, rel, err := fs.where(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	if rel == "" {
		f, err := fs.open(p, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return api.FileInfo{}, err
		}
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return api.FileInfo{}, pathError(p, err)
		}
		return info(path.Base(r.Prefix), p, &st, ""), nil
	}
	dir, name, err := fs.parent(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer dir.Close()
	return statAt(int(dir.Fd()), name, p)
}

func statAt(dfd int, name, p string) (api.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	link := ""
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return api.FileInfo{}, pathError(p, err)
		}
		link = string(buf[:n])
	}
	return info(name, p, &st, link), nil
}

// List describes the entries of directory p, sorted by name (symlinks
// described, not followed).
func (fs *FS) List(ctx context.Context, p string) ([]api.FileInfo, error) {
	f, err := fs.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(MaxList + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, pathError(p, unwrapPath(err))
	}
	if len(names) > MaxList {
		return nil, api.Errorf(api.ErrLimit, "list %s: more than %d entries", p, MaxList)
	}
	sort.Strings(names)
	out := make([]api.FileInfo, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fi, err := statAt(int(f.Fd()), n, path.Join("/", p, n))
		if errors.Is(err, api.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fi)
	}
	return out, nil
}

// Remove removes p: a file, a symlink (not its target) or an empty
// directory, or with recursive a directory and everything in it.
func (fs *FS) Remove(ctx context.Context, p string, recursive bool) error {
	dir, name, err := fs.parent(p)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := removeAt(ctx, int(dir.Fd()), name, recursive); err != nil {
		return pathError(p, err)
	}
	return nil
}

func removeAt(ctx context.Context, dfd int, name string, recursive bool) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(dfd, name, 0)
	}
	if recursive {
		// O_NOFOLLOW: a directory swapped for a symlink meanwhile is
		// refused, never walked into.
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		d := os.NewFile(uintptr(fd), name)
		defer d.Close()
		// A batch of names at a time, removed before the next is read,
		// as rm -r does: the stream stays open while the children are.
		for {
			names, err := d.Readdirnames(removeBatch)
			for _, n := range names {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := removeAt(ctx, fd, n, true); err != nil && err != unix.ENOENT {
					return err
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return unwrapPath(err)
			}
		}
	}
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}

// Mkdir makes directory p with mode (0: 0755); with parents, it makes the
// missing directories above it too and an existing directory at p is no
// error.
func (fs *FS) Mkdir(ctx context.Context, p string, mode uint32, parents bool) (api.FileInfo, error) {
	if mode == 0 {
		mode = 0o755
	}
	if mode > 0o7777 {
		return api.FileInfo{}, api.Errorf(api.ErrBadRequest, "mkdir %s: mode %o is not a permission mode", p, mode)
	}
	if parents {
		r, rel, err := fs.where(p)
		if err != nil {
			return api.FileInfo{}, err
		}
		if rel == "" {
			return fs.Stat(ctx, p)
		}
		parts := strings.Split(rel, "/")
		for i := range parts[:len(parts)-1] {
			sub := path.Join(r.Prefix, strings.Join(parts[:i+1], "/"))
			if _, err := fs.mkdir(ctx, sub, 0o755, true); err != nil {
				return api.FileInfo{}, err
			}
		}
	}
	return fs.mkdir(ctx, p, mode, parents)
}

func (fs *FS) mkdir(ctx context.Context, p string, mode uint32, existOK bool) (api.FileInfo, error) {
	dir, name, err := fs.parent(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	err = unix.Mkdirat(dfd, name, mode)
	if err == unix.EEXIST && existOK {
		fi, serr := statAt(dfd, name, p)
		if serr == nil && fi.Type == api.FileDir {
			return fi, nil
		}
		if serr == nil && fi.Type == api.FileSymlink {
			// A symlink to a directory inside the root will do.
			f, oerr := fs.open(p, unix.O_PATH|unix.O_DIRECTORY)
			if oerr == nil {
				f.Close()
				return fi, nil
			}
		}
	}
	if err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	defer unix.Close(fd)
	if err := chown(ctx, fd); err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	if err := unix.Fchmod(fd, mode); err != nil { // the umask cut it
		return api.FileInfo{}, pathError(p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return api.FileInfo{}, pathError(p, err)
	}
	return info(name, p, &st, ""), nil
}

// chown gives fd to the requester when the daemon is root and the
// requester is not.
func chown(ctx context.Context, fd int) error {
	c, ok := access.FromContext(ctx)
	if !ok || c.UID == 0 || os.Geteuid() != 0 || c.UID == uint32(os.Geteuid()) {
		return nil
	}
	return unix.Fchown(fd, int(c.UID), int(c.GID))
}

func info(name, p string, st *unix.Stat_t, link string) api.FileInfo {
	t := fileType(st.Mode)
	return api.FileInfo{Name: name, Path: "/" + strings.TrimLeft(path.Clean("/"+p), "/"), Type: t, Size: st.Size, Mode: st.Mode & 0o7777,
		IsDir: t == api.FileDir, MTimeNS: time.Unix(st.Mtim.Unix()).UnixNano(), Link: link}
}

func fileType(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return api.FileRegular
	case unix.S_IFDIR:
		return api.FileDir
	case unix.S_IFLNK:
		return api.FileSymlink
	}
	return api.FileOther
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

// pathError wraps errno err with p and the api sentinel it means.
func pathError(p string, err error) error {
	var e unix.Errno
	if !errors.As(err, &e) {
		return fmt.Errorf("%s: %w", p, err)
	}
	var s error
	switch e {
	case unix.ENOENT:
		s = api.ErrNotFound
	case unix.EEXIST, unix.ENOTEMPTY:
		s = api.ErrExists
	case unix.ENOTDIR, unix.EISDIR, unix.ELOOP, unix.EINVAL, unix.ENAMETOOLONG, unix.EXDEV:
		s = api.ErrBadRequest
	case unix.EACCES, unix.EPERM:
		s = api.ErrForbidden
	case unix.EROFS:
		s = api.ErrState
	case unix.ENOSPC, unix.EDQUOT:
		s = api.ErrNoSpace
	default:
		s = api.ErrInternal
	}
	return fmt.Errorf("%s: %w: %w", strconv.Quote(p), s, e)
}
