package cowfs

import (
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirFS is go-fuse's bridge with directories opened without requests. It
// answers OPENDIR with ENOSYS; from then on the kernel opens directories by
// itself (no OPENDIR, no RELEASEDIR: two round trips fewer for each
// opendir(3), which git status makes for every directory of a checkout) and
// keeps their listings (FOPEN_CACHE_DIR is its default then, with the
// invalidations of notify.go keeping them right). A READDIR then comes with
// handle 0, only to fill the kernel's cache; dirFS opens a bridge handle for
// it, kept for the READDIRs that continue the same listing and released at
// its end.
type dirFS struct {
	fuse.RawFileSystem

	mu    sync.Mutex
	reads map[uint64]*dirRead // node id -> the listing being read
}

// dirRead is one listing being read into the kernel's cache.
type dirRead struct {
	mu sync.Mutex // one READDIR at a time on a handle
	fh uint64
}

// maxDirReads bounds the listings read in part (a reader may stop early).
const maxDirReads = 256

func newDirFS(raw fuse.RawFileSystem) *dirFS {
	return &dirFS{RawFileSystem: raw, reads: map[uint64]*dirRead{}}
}

func (d *dirFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

func (d *dirFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.Fh != 0 {
		return d.RawFileSystem.ReadDir(cancel, in, out)
	}
	r, st := d.handle(cancel, in)
	if st != fuse.OK {
		return st
	}
	defer r.mu.Unlock()
	rin := *in
	rin.Fh = r.fh
	st = d.RawFileSystem.ReadDir(cancel, &rin, out)
	if st != fuse.OK || out.Offset == in.Offset {
		d.release(in.NodeId, r) // an error, or the end of the listing
	}
	return st
}

// handle returns the listing of in's directory, locked: the one being read,
// or a new one when the read starts over (offset 0) or none is open.
func (d *dirFS) handle(cancel <-chan struct{}, in *fuse.ReadIn) (*dirRead, fuse.Status) {
	d.mu.Lock()
	r := d.reads[in.NodeId]
	if r != nil && in.Offset != 0 {
		d.mu.Unlock()
		r.mu.Lock()
		d.mu.Lock()
		still := d.reads[in.NodeId] == r
		d.mu.Unlock()
		if still {
			return r, fuse.OK
		}
		r.mu.Unlock() // released meanwhile: open anew
		d.mu.Lock()
	}
	d.mu.Unlock()
	var oo fuse.OpenOut
	oin := fuse.OpenIn{InHeader: in.InHeader, Flags: syscall.O_RDONLY | syscall.O_DIRECTORY}
	if st := d.RawFileSystem.OpenDir(cancel, &oin, &oo); st != fuse.OK {
		return nil, st
	}
	nr := &dirRead{fh: oo.Fh}
	nr.mu.Lock()
	d.mu.Lock()
	old := d.reads[in.NodeId]
	d.reads[in.NodeId] = nr
	var evict []*dirRead
	var evictIDs []uint64
	if len(d.reads) > maxDirReads {
		for id, x := range d.reads {
			if x != nr {
				evict, evictIDs = append(evict, x), append(evictIDs, id)
			}
			if len(d.reads)-len(evict) <= maxDirReads/2 {
				break
			}
		}
		for _, id := range evictIDs {
			delete(d.reads, id)
		}
	}
	d.mu.Unlock()
	if old != nil {
		evict, evictIDs = append(evict, old), append(evictIDs, in.NodeId)
	}
	for i, x := range evict {
		x.mu.Lock() // wait for a READDIR still on it
		d.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: evictIDs[i]}, Fh: x.fh})
		x.mu.Unlock()
	}
	return nr, fuse.OK
}

// release drops r (locked by the caller) if it is still in.NodeId's listing.
func (d *dirFS) release(id uint64, r *dirRead) {
	d.mu.Lock()
	if d.reads[id] != r {
		d.mu.Unlock()
		return // evicted: released by whoever evicted it
	}
	delete(d.reads, id)
	d.mu.Unlock()
	d.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: id}, Fh: r.fh})
}
