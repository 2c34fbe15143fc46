package store

import (
	"bytes"
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// rawDirent is one entry of getdents64: name, inode and d_type, without a
// stat per entry.
type rawDirent struct {
	name string
	ino  uint64
	typ  uint8
}

// readDirents lists the directory at real (walked beneath its root, no
// symlink followed) with getdents64.
func (s *Store) readDirents(real string) ([]rawDirent, error) {
	// O_NOATIME: listing a directory for a merge must not change what it reports.
	fd, err := s.open(real, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME, 0)
	if err == unix.EPERM {
		fd, err = s.open(real, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return direntsOf(fd, real)
}

// direntsOf lists the open directory fd from where its offset is to its end.
func direntsOf(fd int, path string) ([]rawDirent, error) {
	var out []rawDirent
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, &os.PathError{Op: "getdents", Path: path, Err: err}
		}
		if n <= 0 {
			return out, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen == 0 || reclen > len(b) {
				break
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				out = append(out, rawDirent{name: s, ino: binary.NativeEndian.Uint64(b[0:8]), typ: b[18]})
			}
			b = b[reclen:]
		}
	}
}

// dtToMode maps a d_type to S_IFMT bits.
func dtToMode(t uint8) uint32 {
	switch t {
	case unix.DT_DIR:
		return unix.S_IFDIR
	case unix.DT_LNK:
		return unix.S_IFLNK
	case unix.DT_FIFO:
		return unix.S_IFIFO
	case unix.DT_SOCK:
		return unix.S_IFSOCK
	case unix.DT_CHR:
		return unix.S_IFCHR
	case unix.DT_BLK:
		return unix.S_IFBLK
	}
	return unix.S_IFREG
}
