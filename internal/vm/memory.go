package vm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const pageSize = 4096

// ramMapping is one VMA of a QEMU process's guest RAM: the mapping of its
// memory file (by inode).
type ramMapping struct {
	start, end uint64 // virtual addresses
	offset     uint64 // in the file
}

// ramMappings finds pid's mappings of the file with inode ino.
func ramMappings(pid int, ino uint64) ([]ramMapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []ramMapping
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 6 {
			continue
		}
		if i, err := strconv.ParseUint(fs[4], 10, 64); err != nil || i != ino {
			continue
		}
		a, b, _ := strings.Cut(fs[0], "-")
		start, err1 := strconv.ParseUint(a, 16, 64)
		end, err2 := strconv.ParseUint(b, 16, 64)
		off, err3 := strconv.ParseUint(fs[2], 16, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("maps line %q: %w", s.Text(), err)
		}
		out = append(out, ramMapping{start, end, off})
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("process %d maps no file of inode %d", pid, ino)
	}
	return out, nil
}

// captureDirty writes into out, at their file offsets, the pages of pid's
// private mapping of its memory file (inode ino) that differ from the
// file: the pages the guest (or a device) wrote, which are anonymous
// copies now (pagemap: present and not file-backed, or swapped). It
// returns a bitmap (by file page) of what it wrote and the bytes written.
// pid must be paused: nothing may write its RAM meanwhile.
func captureDirty(pid int, ino uint64, size int64, out *os.File) ([]bool, int64, error) {
	maps, err := ramMappings(pid, ino)
	if err != nil {
		return nil, 0, err
	}
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, 0, err
	}
	defer pm.Close()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, 0, err
	}
	defer mem.Close()
	dirty := make([]bool, (size+pageSize-1)/pageSize)
	var written int64
	buf := make([]byte, 0, 1<<20)
	for _, m := range maps {
		n := (m.end - m.start) / pageSize
		ents := make([]byte, n*8)
		if _, err := pm.ReadAt(ents, int64(m.start/pageSize*8)); err != nil && err != io.EOF {
			return nil, 0, fmt.Errorf("pagemap: %w", err)
		}
		isDirty := func(i uint64) bool {
			e := binary.LittleEndian.Uint64(ents[i*8:])
			present, swapped, file := e&(1<<63) != 0, e&(1<<62) != 0, e&(1<<61) != 0
			return (present && !file) || swapped
		}
		for i := uint64(0); i < n; {
			if !isDirty(i) {
				i++
				continue
			}
			j := i
			for j < n && isDirty(j) && (j-i)*pageSize < 1<<20 {
				j++
			}
			ln := (j - i) * pageSize
			buf = buf[:ln]
			if _, err := mem.ReadAt(buf, int64(m.start+i*pageSize)); err != nil {
				return nil, 0, fmt.Errorf("read guest RAM: %w", err)
			}
			off := m.offset + i*pageSize
			if _, err := out.WriteAt(buf, int64(off)); err != nil {
				return nil, 0, err
			}
			for k := off / pageSize; k < (off+ln)/pageSize && k < uint64(len(dirty)); k++ {
				dirty[k] = true
			}
			written += int64(ln)
			i = j
		}
	}
	return dirty, written, nil
}

// fillFrom copies into out what base holds (its data, not its holes) at
// the pages dirty does not mark: reflinked (FICLONERANGE) where the
// filesystem shares blocks, copied (copy_file_range) otherwise. It
// reports whether it reflinked.
func fillFrom(out, base *os.File, dirty []bool) (bool, error) {
	st, err := base.Stat()
	if err != nil {
		return false, err
	}
	size := st.Size()
	if err := out.Truncate(size); err != nil {
		return false, err
	}
	reflink := true
	copyRange := func(off, n int64) error {
		if reflink {
			err := unix.IoctlFileCloneRange(int(out.Fd()), &unix.FileCloneRange{Src_fd: int64(base.Fd()), Src_offset: uint64(off), Src_length: uint64(n), Dest_offset: uint64(off)})
			if err == nil {
				return nil
			}
			reflink = false
		}
		for n > 0 {
			o1, o2 := off, off
			c, err := unix.CopyFileRange(int(base.Fd()), &o1, int(out.Fd()), &o2, int(n), 0)
			if err != nil {
				return fmt.Errorf("copy_file_range: %w", err)
			}
			if c == 0 {
				return io.ErrUnexpectedEOF
			}
			off += int64(c)
			n -= int64(c)
		}
		return nil
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(base.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			if errors.Is(err, unix.ENXIO) {
				break // holes to the end
			}
			return false, err
		}
		hole, err := unix.Seek(int(base.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return false, err
		}
		// Runs of clean pages in [data, hole).
		for p := data / pageSize; p*pageSize < hole; {
			if p < int64(len(dirty)) && dirty[p] {
				p++
				continue
			}
			q := p
			for q*pageSize < hole && !(q < int64(len(dirty)) && dirty[q]) {
				q++
			}
			from, to := max(p*pageSize, data), min(q*pageSize, hole)
			if err := copyRange(from, to-from); err != nil {
				return false, err
			}
			p = q
		}
		off = hole
	}
	return reflink, nil
}
