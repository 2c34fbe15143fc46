package store

import (
	"io"

	"golang.org/x/sys/unix"
)

// copyExtents copies the data extents of one file to another with
// copy_file_range (a reflink where the filesystem can), keeping holes: a
// sparse 5 GiB file copies up in the time of its data.
func copyExtents(in, out int) error {
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return err
	}
	size := st.Size
	for off := int64(0); off < size; {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole is left
		}
		if err != nil {
			data = off // no SEEK_DATA here: copy everything
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil {
			hole = size
		}
		for data < hole {
			roff, woff := data, data
			n, err := unix.CopyFileRange(in, &roff, out, &woff, int(min(hole-data, 1<<30)), 0)
			if err == unix.EXDEV || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EINVAL {
				if err := copyPlain(in, out, data, hole); err != nil {
					return err
				}
				break
			}
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			data += int64(n)
		}
		off = hole
	}
	return unix.Ftruncate(out, size)
}

func copyPlain(in, out int, from, to int64) error {
	buf := make([]byte, 1<<20)
	for from < to {
		n, err := unix.Pread(in, buf[:min(int64(len(buf)), to-from)], from)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		if _, err := unix.Pwrite(out, buf[:n], from); err != nil {
			return err
		}
		from += int64(n)
	}
	return nil
}
