package vm

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/internal/vm/wire"
)

// fileServer answers the guest's file calls (wire.OpFS) on the node's
// files, confined to their top (os.Root: no path, symlink or ".." leads
// out). Calls are by path, so that a fork's child needs nothing of its
// source's server: its own serves its own files.
type fileServer struct {
	root *os.Root
}

func newFileServer(dir string) (*fileServer, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &fileServer{root: r}, nil
}

func (s *fileServer) close() { s.root.Close() }

func name(p string) string {
	if p == "" {
		return "."
	}
	return p
}

func errno(err error) int {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return int(syscall.ENOENT)
	case errors.Is(err, fs.ErrExist):
		return int(syscall.EEXIST)
	case errors.Is(err, fs.ErrPermission):
		return int(syscall.EACCES)
	}
	return int(syscall.EIO)
}

func statOf(fi fs.FileInfo) *wire.Stat {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return &wire.Stat{Size: fi.Size()}
	}
	return &wire.Stat{Mode: st.Mode, Size: st.Size, Ino: st.Ino, Nlink: uint32(st.Nlink), Uid: st.Uid, Gid: st.Gid,
		Atime: st.Atim.Nano(), Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// serve answers m.
func (s *fileServer) serve(m *wire.Msg) *wire.Msg {
	r := &wire.Msg{Op: wire.OpFSR, ID: m.ID}
	p := name(m.Path)
	stat := func() {
		fi, err := s.root.Lstat(p)
		if err != nil {
			r.Errno = errno(err)
			return
		}
		r.Stat = statOf(fi)
	}
	var err error
	switch m.FS {
	case wire.FSStat:
		stat()
		return r
	case wire.FSReaddir:
		var f *os.File
		if f, err = s.root.Open(p); err == nil {
			var ents []fs.DirEntry
			ents, err = f.ReadDir(-1)
			f.Close()
			for _, e := range ents {
				d := wire.Dirent{Name: e.Name(), Mode: uint32(syscall.S_IFREG)}
				if fi, err := e.Info(); err == nil {
					d.Mode = statOf(fi).Mode
					d.Ino = statOf(fi).Ino
				}
				r.Ents = append(r.Ents, d)
			}
		}
	case wire.FSRead:
		var f *os.File
		if f, err = s.root.Open(p); err == nil {
			buf := make([]byte, min(m.Size, wire.ChunkSize))
			n, rerr := f.ReadAt(buf, m.Off)
			f.Close()
			if rerr != nil && rerr != io.EOF {
				err = rerr
			}
			r.Data = buf[:n]
		}
	case wire.FSWrite:
		var f *os.File
		if f, err = s.root.OpenFile(p, os.O_WRONLY, 0); err == nil {
			var n int
			n, err = f.WriteAt(m.Data, m.Off)
			f.Close()
			r.Size = int64(n)
		}
	case wire.FSCreate:
		flags := os.O_RDWR | os.O_CREATE
		if m.Flags&wire.SetExcl != 0 {
			flags |= os.O_EXCL
		}
		var f *os.File
		if f, err = s.root.OpenFile(p, flags, fs.FileMode(m.Mode&0o7777)); err == nil {
			f.Close()
			stat()
		}
	case wire.FSMkdir:
		if err = s.root.Mkdir(p, fs.FileMode(m.Mode&0o7777)); err == nil {
			stat()
		}
	case wire.FSRemove:
		err = s.root.Remove(p)
	case wire.FSRename:
		err = s.root.Rename(p, name(m.Path2))
	case wire.FSSetattr:
		if m.Flags&wire.SetMode != 0 && err == nil {
			err = s.root.Chmod(p, fs.FileMode(m.Mode&0o7777))
		}
		if m.Flags&wire.SetSize != 0 && err == nil {
			var f *os.File
			if f, err = s.root.OpenFile(p, os.O_WRONLY, 0); err == nil {
				err = f.Truncate(m.Size)
				f.Close()
			}
		}
		if m.Flags&wire.SetTimes != 0 && err == nil {
			err = s.root.Chtimes(p, time.Unix(0, m.Atime), time.Unix(0, m.Mtime))
		}
		if err == nil {
			stat()
		}
	case wire.FSReadlink:
		r.Path2, err = s.root.Readlink(p)
	case wire.FSSymlink:
		if err = s.root.Symlink(m.Path2, p); err == nil {
			stat()
		}
	default:
		r.Errno = int(syscall.ENOSYS)
	}
	if err != nil {
		r.Errno = errno(err)
	}
	return r
}
