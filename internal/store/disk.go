package store

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
)

// Disk accounting. The store knows what its layers cost on disk: every file
// and directory a layer holds is measured by its allocated size (st_blocks,
// what du counts; a sparse file costs its data, not its length), and the
// layer's own directory too. The base directory is the user's and is not
// counted; what main's writes preserve into snapshots is. The figures are
// kept in memory and recomputed from the layers at Open, so a crash loses
// nothing (they are never persisted).
//
// Every change the store makes itself (a copy-up, a create, a preserve, a
// remove, a rename) measures what it changed. Writes through descriptors
// are measured when the daemon serves them, when the descriptor is closed,
// and every SampleEvery for every file open for writing: a write served by
// FUSE passthrough never reaches the daemon, so the sampler is what counts
// it. The figures are therefore at most SampleEvery behind the disk.
//
// The limit (SetLimit; a tree's disk budget) is enforced where the daemon
// sees the bytes coming: a copy-up, a create or a preserve that would pass
// it fails with ENOSPC before it changes anything, and so does a write or
// a fallocate served by the daemon (Reserve, before the data is written, so
// that a refused write leaves the file as it was; a truncation allocates
// nothing and is only measured). Passthrough
// writes cannot be refused by the daemon, so under a limit no descriptor
// opened for writing in a branch gets passthrough (Metered): every write is
// served by the daemon and checked before it is made. (A passthrough writer
// opened while there was room once wrote 300 MB into a 100 MB budget: no
// reservation for it can be enforced once the kernel writes for it.)
// Readers keep passthrough while the store has PassthroughRoom(limit) left
// (WritePassthrough). The sampler still measures every writer (main's,
// which no limit counts, and the descriptors a fork moved).

// dirBlock is what a new directory costs (one block of the usual 4 KiB).
const dirBlock = 4096

// DefaultSampleEvery is how often the store measures its open writers.
const DefaultSampleEvery = time.Second

// PassthroughRoom is the room a store must have left under its limit for a
// descriptor opened for writing to get FUSE passthrough: an eighth of the
// limit, and at least 64 MiB.
func PassthroughRoom(limit int64) int64 { return max(limit/8, 64<<20) }

// measure is what rel allocates in layer l (a whiteout, a device node, or
// an opaque marker, an empty file: nothing; the layer's own directory, rel "", is counted
// by accountRoot).
func (s *Store) measure(l *layer, rel string, k kind) int64 {
	if k == kWhiteout || rel == "" {
		return 0
	}
	var st unix.Stat_t
	if s.Lstat(l.real(rel), &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// setAlloc records that rel allocates n bytes in layer l.
func (s *Store) setAlloc(l *layer, rel string, n int64) {
	old := l.alloc[rel]
	if n == old {
		return
	}
	if n == 0 {
		delete(l.alloc, rel)
	} else {
		if l.alloc == nil {
			l.alloc = map[string]int64{}
		}
		l.alloc[rel] = n
	}
	l.held += n - old
	s.used += n - old
}

// accountRoot counts (again) layer l's own directory.
func (s *Store) accountRoot(l *layer) {
	var st unix.Stat_t
	if s.Lstat(l.dir, &st) != nil {
		return
	}
	n := st.Blocks * 512
	l.held += n - l.rootAlloc
	s.used += n - l.rootAlloc
	l.rootAlloc = n
}

// remeasureDir counts directory dir of layer l again after an entry was
// made in it: a directory grows by a block every so many names.
func (s *Store) remeasureDir(l *layer, dir string) {
	if dir == "" {
		s.accountRoot(l)
		return
	}
	if e, ok := s.get(l, dir); ok && e.kind == kDir {
		s.setAlloc(l, dir, s.measure(l, dir, kDir))
	}
}

// fits fails with ENOSPC if n more bytes (and the writes in flight) would
// take the store past its limit.
func (s *Store) fits(n int64) error {
	if s.limit > 0 && s.used+s.reserved+n > s.limit {
		return syscall.ENOSPC
	}
	return nil
}

// SetLimit limits the bytes the store's layers may hold on disk (0: none).
// A limit below what they hold already is taken: nothing more fits until
// space is freed.
func (s *Store) SetLimit(n int64) error {
	if n < 0 {
		return api.Errorf(api.ErrBadRequest, "disk limit %d: must be >= 0", n)
	}
	s.mu.Lock()
	s.limit = n
	s.mu.Unlock()
	return nil
}

// Used is the bytes every layer holds on disk, and the limit (0: none).
func (s *Store) Used() (used, limit int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.used, s.limit
}

// Held is the bytes each branch holds on disk: the layers it made itself
// (above its fork point), frozen or not. Main holds the snapshots its
// writes preserve into, and any layer no live branch made (none, but the
// sum must be whole). The values sum to Used.
func (s *Store) Held() map[string]int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]int64, len(s.branches))
	seen := map[*layer]bool{}
	for _, b := range s.branches {
		out[b.Name] += 0
		if b.Name == Main {
			continue
		}
		for _, l := range b.chain[b.forkDepth:] {
			if !seen[l] && s.layers[l.id] == l {
				seen[l] = true
				out[b.Name] += l.held
			}
		}
	}
	for _, l := range s.layers {
		if !seen[l] {
			out[Main] += l.held
		}
	}
	return out
}

// Metered reports whether the writes of b must be served by the daemon and
// counted before they are made: b has a quota, or the store a limit (main
// writes the base, which no limit counts).
func (s *Store) Metered(b *Branch) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return b.Quota > 0 || (s.limit > 0 && b.Name != Main)
}

// WritePassthrough reports whether a descriptor opened for writing in b now
// may write by FUSE passthrough, unseen: b has no quota, and b is main or
// the store has no limit or PassthroughRoom of it left.
func (s *Store) WritePassthrough(b *Branch) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if b.Quota > 0 {
		return false
	}
	return s.limit == 0 || b.Name == Main || s.limit-s.used-s.reserved >= PassthroughRoom(s.limit)
}

// Reserve makes room for a write the daemon is about to make in b that may
// lengthen the file by grow bytes (what a quota counts) and allocate n more
// on disk: it fails with ENOSPC, changing nothing, if either would pass b's
// quota or the store's limit. It returns what it reserved, to hand to
// Settle once the write is done (or failed).
func (s *Store) Reserve(b *Branch, grow, n int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Name == Main {
		return 0, nil
	}
	if b.Quota > 0 && grow > 0 && s.usage(b)+grow > b.Quota {
		return 0, syscall.ENOSPC
	}
	n = max(n, 0)
	if err := s.fits(n); err != nil {
		return 0, err
	}
	if grow > 0 {
		b.head().bytes += grow
	}
	s.reserved += n
	return n, nil
}

// Settle ends a Reserve: the reservation goes, and the file at real (a
// descriptor's real path) is recorded as allocating alloc bytes (unless
// alloc is negative: not measured).
func (s *Store) Settle(real string, reserved, alloc int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved -= reserved
	if alloc >= 0 {
		s.record(real, alloc)
	}
}

// Measure records what the file at real (a layer's file, changed outside
// the store: a truncation) allocates now.
func (s *Store) Measure(real string) {
	var st unix.Stat_t
	if s.Lstat(real, &st) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(real, st.Blocks*512)
}

// record sets the allocation of the file at real, if it is a layer's file
// the index holds.
func (s *Store) record(real string, alloc int64) {
	l, rel, ok := s.entryOf(real)
	if !ok {
		return
	}
	if e, ok := s.get(l, rel); ok && e.kind == kFile {
		s.setAlloc(l, rel, alloc)
	}
}

// entryOf finds the layer and relative path of a real path under Dir/layers.
func (s *Store) entryOf(real string) (*layer, string, bool) {
	prefix := filepath.Join(s.dir, "layers") + "/"
	if !strings.HasPrefix(real, prefix) {
		return nil, "", false
	}
	idStr, rel, ok := strings.Cut(real[len(prefix):], "/")
	if !ok || rel == "" {
		return nil, "", false
	}
	id, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil {
		return nil, "", false
	}
	l := s.layers[id]
	if l == nil {
		return nil, "", false
	}
	return l, rel, true
}

// sample measures every file open for writing in a layer: the lstats run
// without the lock, the results are recorded under it.
func (s *Store) sample() {
	s.mu.RLock()
	paths := make([]string, 0, len(s.writers))
	for p := range s.writers {
		if _, _, ok := s.entryOf(p); ok {
			paths = append(paths, p)
		}
	}
	s.mu.RUnlock()
	if len(paths) == 0 {
		return
	}
	allocs := make([]int64, len(paths))
	for i, p := range paths {
		var st unix.Stat_t
		if s.Lstat(p, &st) != nil {
			allocs[i] = -1
			continue
		}
		allocs[i] = st.Blocks * 512
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range paths {
		if allocs[i] >= 0 {
			s.record(p, allocs[i])
		}
	}
	over := s.limit > 0 && s.used > s.limit
	if over && !s.overLimit {
		s.log.Warn("disk limit passed by writers served by passthrough; nothing more fits until space is freed",
			"dir", s.dir, "used", s.used, "limit", s.limit)
	}
	s.overLimit = over
}

// sampler runs sample every period until stop is closed.
func (s *Store) sampler(period time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// AllocGrowth is what a write of n bytes at off may newly allocate in a
// file whose fstat is st: the blocks past the allocated end, or, in a file
// with holes, every block the write touches.
func AllocGrowth(st *unix.Stat_t, off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	const bs = 4096
	end := roundUp(off+n, bs)
	start := off / bs * bs
	if st.Blocks*512 >= roundUp(st.Size, bs) {
		// No holes: only what lies past the allocated end is new.
		start = max(start, roundUp(st.Size, bs))
	}
	return max(end-start, 0)
}

func roundUp(v, to int64) int64 { return (v + to - 1) / to * to }
