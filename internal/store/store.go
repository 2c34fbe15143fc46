package store

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/arbor-dev/arbor/api"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// Main is the name of the branch that is the base directory itself.
const Main = "main"

// Config configures a Store. Dir holds the store's own state (metadata and
// layers); it should be on the same filesystem as Base so that commits into
// main move files rather than copy them.
type Config struct {
	Dir    string
	Base   string
	Logger *slog.Logger
	// SampleEvery is how often the files open for writing are measured
	// (see disk.go); 0 means DefaultSampleEvery.
	SampleEvery time.Duration
}

// Store is the branches of one base directory.
type Store struct {
	dir, base string
	// baseFd and dirFd are the roots every path is walked beneath (see
	// beneath.go), opened once at Open; baseFd holds the base's lock.
	baseFd, dirFd int
	log           *slog.Logger
	db            *bolt.DB

	mu        sync.RWMutex // guards everything below, the index and every layer directory
	branches  map[string]*Branch
	layers    map[uint64]*layer
	index     map[string][]entry // relative path -> the layers that hold it
	writers   map[string]writing // real path -> descriptors open for writing on it
	nlinks    int                // link copies in all layers (0: resolve skips the look-up)
	nextID    uint64
	markGen   uint64 // the stamp of reclaimLocked's last marking (layer.mark)
	used      int64  // bytes every layer holds on disk (see disk.go)
	reserved  int64  // bytes reserved by writes in flight (Reserve)
	limit     int64  // the most used may reach (0: none)
	overLimit bool   // used > limit at the last sample (logged once per passing)

	dlMu     sync.Mutex       // guards dirLinks; taken with mu held
	dirLinks map[dlKey]uint32 // link counts of merged directories (see DirLinks)

	gc sync.WaitGroup // background reclaim of dropped layers

	stopSampler chan struct{} // closed by Close
	sampling    sync.WaitGroup
	closeOnce   sync.Once

	watch watchers // see Watch

	// pending is a commit into main decided (journaled) whose apply failed:
	// it is finished by a Commit of its child again, or by the replay at
	// the next Open; until then main forks and commits nothing else.
	pending *journal
	// applying: pending is being applied without the lock (applyMain);
	// another Commit of its child waits its turn with ErrBusy.
	applying bool
	applies  sync.WaitGroup // applyMain in flight: Close waits for it
}

// Branch is one branch. Its fields are guarded by Store.mu.
type Branch struct {
	ID     uint64
	Name   string
	Parent string
	chain  []*layer // chain[i] is at depth i+1; main's is empty
	// forkHead and forkGen record the parent's head and generation just after
	// this branch's fork: the parent is unchanged iff both still hold and the
	// head is empty. For a child of main, snap is the snapshot it reads.
	forkHead uint64
	forkGen  uint64
	snap     *layer
	// forkDepth is how many layers of the chain the branch inherited at its
	// fork: the layers above are its own changes.
	forkDepth int
	gen       uint64 // bumped by every commit into this branch
	stale     bool
	gone      bool // aborted or committed: a handle still held fails with ESTALE
	// readOnly refuses every change with EROFS (a suspended node's branch);
	// kept in memory only: the owner sets it again after a restart.
	readOnly bool
	// committing: the branch's commit into main is decided (journaled) but
	// not yet wholly applied (Store.pending): its files are moving into the
	// base, so it answers ESTALE, and refuses abort until a Commit of it
	// finishes the journal.
	committing bool
	Quota      int64
	kids       []*Branch // the children forked from it, while they last (see unlink)
}

// IsStale reports whether the branch lost a commit race (or is gone).
func (s *Store) IsStale(b *Branch) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return b.stale
}

func (b *Branch) head() *layer {
	if len(b.chain) == 0 {
		return nil
	}
	return b.chain[len(b.chain)-1]
}

// contains reports whether l is in b's chain, in O(1).
func (b *Branch) contains(l *layer) bool {
	return l.depth >= 1 && l.depth <= len(b.chain) && b.chain[l.depth-1] == l
}

var (
	bucketBranches = []byte("branches")
	bucketMeta     = []byte("meta")
	bucketJournal  = []byte("journal")
	bucketKept     = []byte("kept") // "<layer id>/<rel>" -> the signature of a file kept for a writer
	keyNextID      = []byte("next_id")
	keyMainGen     = []byte("main_gen")
)

// Open opens (creating if need be) the store in cfg.Dir over cfg.Base,
// finishing any commit a crash cut short and reclaiming unreferenced layers.
func Open(cfg Config) (s *Store, err error) {
	if cfg.Dir == "" || cfg.Base == "" {
		return nil, api.Errorf(api.ErrBadRequest, "store: Dir and Base are required")
	}
	base, err := filepath.Abs(cfg.Base)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	// The base is resolved here, once: the descriptor is what every path
	// of it is walked from, and what holds the lock.
	baseFd, err := openRoot(base)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			unix.Close(baseFd)
		}
	}()
	if err := lockBase(baseFd, base); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "layers"), 0o700); err != nil {
		return nil, err
	}
	dirFd, err := openRoot(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			unix.Close(dirFd)
		}
	}()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// NoSync: a write survives SIGKILL through the page cache; durable
	// commits call db.Sync explicitly.
	db, err := bolt.Open(filepath.Join(dir, "meta.db"), 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		return nil, fmt.Errorf("store: open metadata: %w", err)
	}
	s = &Store{dir: dir, base: base, baseFd: baseFd, dirFd: dirFd, log: log, db: db,
		branches: map[string]*Branch{}, layers: map[uint64]*layer{}, index: map[string][]entry{}, writers: map[string]writing{}}
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.replayJournal(); err != nil {
		db.Close()
		return nil, err
	}
	s.reclaim()
	every := cfg.SampleEvery
	if every <= 0 {
		every = DefaultSampleEvery
	}
	s.stopSampler = make(chan struct{})
	s.sampling.Go(func() { s.sampler(every, s.stopSampler) })
	return s, nil
}

// Close stops the sampler, waits for background reclaim and closes the
// metadata.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stopSampler)
		s.sampling.Wait()
		s.applies.Wait()
		s.gc.Wait()
		err = s.db.Close()
		unix.Close(s.dirFd)
		unix.Close(s.baseFd) // and with it the base's lock
	})
	return err
}

// Base is the base directory.
func (s *Store) Base() string { return s.base }

// Dir is the directory of the store's own state (metadata and layers).
func (s *Store) Dir() string { return s.dir }

func (s *Store) load() error {
	var recs []record
	var mainGen uint64
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketBranches, bucketMeta, bucketJournal, bucketKept} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		s.nextID = btoi(m.Get(keyNextID))
		mainGen = btoi(m.Get(keyMainGen))
		return tx.Bucket(bucketBranches).ForEach(func(k, v []byte) error {
			r, err := decodeRecord(string(k), v)
			if err != nil {
				return fmt.Errorf("store: branch %q: %w", k, err)
			}
			if r.Name != string(k) || r.Name == Main || r.Name == "" {
				return fmt.Errorf("store: branch %q: a record named %q", k, r.Name)
			}
			recs = append(recs, r)
			return nil
		})
	})
	if err != nil {
		return err
	}
	if s.nextID == 0 {
		s.nextID = 1
	}
	s.branches[Main] = &Branch{ID: 0, Name: Main, gen: mainGen}
	// By ID: a record's Base (its parent) was made before it.
	slices.SortFunc(recs, func(a, b record) int { return cmp.Compare(a.ID, b.ID) })
	byID := make(map[uint64]*Branch, len(recs))
	for _, r := range recs {
		b := &Branch{ID: r.ID, Name: r.Name, Parent: r.Parent, forkHead: r.ForkHead, forkGen: r.ForkGen, forkDepth: r.ForkDep,
			gen: r.Gen, stale: r.Stale, Quota: r.Quota}
		if r.Base != 0 {
			p := byID[r.Base]
			if p == nil || p.Name != r.Parent || len(p.chain) < r.ForkDep {
				return fmt.Errorf("store: branch %q: the base of its chain, branch %d (%q), is missing or shorter than %d layers",
					r.Name, r.Base, r.Parent, r.ForkDep)
			}
			b.chain = append(make([]*layer, 0, r.ForkDep+len(r.Chain)), p.chain[:r.ForkDep]...)
		}
		for _, id := range r.Chain {
			b.chain = append(b.chain, s.layerFor(id, len(b.chain)+1))
		}
		if b.forkDepth < 0 || b.forkDepth > len(b.chain) {
			return fmt.Errorf("store: branch %q: fork depth %d of a chain of %d layers", r.Name, b.forkDepth, len(b.chain))
		}
		if r.Snap != 0 {
			b.snap = s.layerFor(r.Snap, 1)
		}
		s.branches[b.Name] = b
		byID[b.ID] = b
	}
	for _, b := range s.branches {
		s.hold(b)
		// A parent of the same name made later (after its namesake was
		// committed or aborted) is not this one's: IDs grow.
		if p := s.branches[b.Parent]; p != nil && b.Parent != "" && p.ID < b.ID {
			p.kids = append(p.kids, b)
		}
	}
	for _, l := range s.layers {
		if err := s.indexLayer(l); err != nil {
			return err
		}
	}
	return s.loadKept()
}

// loadKept reads the signatures of files kept for writers at forks, and
// forgets those of layers that are gone.
func (s *Store) loadKept() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKept)
		var stale [][]byte
		err := b.ForEach(func(k, v []byte) error {
			id, rel, ok := strings.Cut(string(k), "/")
			n, err := strconv.ParseUint(id, 10, 64)
			l := s.layers[n]
			if !ok || err != nil || l == nil {
				stale = append(stale, append([]byte(nil), k...))
				return nil
			}
			var sig fileSig
			if _, err := fmt.Sscanf(string(v), "%d %d %d %d %d %d", &sig.ino, &sig.size,
				&sig.mtime.Sec, &sig.mtime.Nsec, &sig.ctime.Sec, &sig.ctime.Nsec); err != nil {
				stale = append(stale, append([]byte(nil), k...))
				return nil
			}
			if l.kept == nil {
				l.kept = map[string]fileSig{}
			}
			l.kept[rel] = sig
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range stale {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// saveKept records (or, for a zero signature, forgets) kept signatures.
func (s *Store) saveKept(l *layer, rels ...string) {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKept)
		for _, rel := range rels {
			k := []byte(strconv.FormatUint(l.id, 10) + "/" + rel)
			sig, ok := l.kept[rel]
			if !ok {
				if err := b.Delete(k); err != nil {
					return err
				}
				continue
			}
			v := fmt.Sprintf("%d %d %d %d %d %d", sig.ino, sig.size, sig.mtime.Sec, sig.mtime.Nsec, sig.ctime.Sec, sig.ctime.Nsec)
			if err := b.Put(k, []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("save kept signatures", "err", err)
	}
}

func (s *Store) layerFor(id uint64, depth int) *layer {
	if l, ok := s.layers[id]; ok {
		return l
	}
	l := &layer{id: id, depth: depth, dir: filepath.Join(s.dir, "layers", strconv.FormatUint(id, 10))}
	s.layers[id] = l
	return l
}

func (s *Store) newLayer(depth int) *layer {
	id := s.nextID
	s.nextID++
	return s.layerFor(id, depth)
}

func (s *Store) recordOf(b *Branch) record {
	r := record{ID: b.ID, Name: b.Name, Parent: b.Parent, ForkHead: b.forkHead, ForkGen: b.forkGen, ForkDep: b.forkDepth,
		Gen: b.gen, Stale: b.stale, Quota: b.Quota}
	own := b.chain
	if p := s.chainBase(b); p != nil {
		r.Base = p.ID
		own = b.chain[b.forkDepth:]
	}
	r.Chain = make(chainIDs, len(own))
	for i, l := range own {
		r.Chain[i] = l.id
	}
	if b.snap != nil {
		r.Snap = b.snap.id
	}
	return r
}

// chainBase is the branch whose chain b's record may refer to for the
// first forkDepth layers of its own: b's parent, if both are live and the
// parent's chain still begins with those layers (checked here, so a record
// never refers to what it does not hold). It stays true for as long as b
// is live: a parent's chain only grows (a fork) or is replaced by a child's
// (a commit into it), and such a commit leaves every other child stale,
// its record rewritten whole in the same transaction, or gone. Children of
// main, stale and gone branches write their chains whole.
func (s *Store) chainBase(b *Branch) *Branch {
	if b.stale || b.gone || b.Parent == Main || b.forkDepth == 0 {
		return nil
	}
	p := s.branches[b.Parent]
	if p == nil || p.stale || p.gone || p.ID >= b.ID || len(p.chain) < b.forkDepth {
		return nil
	}
	for i, l := range b.chain[:b.forkDepth] {
		if p.chain[i] != l {
			return nil
		}
	}
	return p
}

// save writes the given branches, deletes the named ones, and the counters,
// in one transaction.
func (s *Store) save(put []*Branch, del []string, extra func(tx *bolt.Tx) error) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		bb := tx.Bucket(bucketBranches)
		for _, b := range put {
			if b.Name == Main {
				continue
			}
			r := s.recordOf(b)
			if err := bb.Put([]byte(b.Name), appendRecord(make([]byte, 0, 48+2*len(r.Chain)), &r)); err != nil {
				return err
			}
		}
		for _, n := range del {
			if err := bb.Delete([]byte(n)); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		if err := m.Put(keyNextID, itob(s.nextID)); err != nil {
			return err
		}
		if err := m.Put(keyMainGen, itob(s.branches[Main].gen)); err != nil {
			return err
		}
		if extra != nil {
			return extra(tx)
		}
		return nil
	})
}

// BranchInfo describes a branch.
type BranchInfo struct {
	Name   string
	Parent string
	Stale  bool
	Depth  int
	Quota  int64
}

// Branches lists every branch, main first, then by name.
func (s *Store) Branches() []BranchInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]BranchInfo, 0, len(s.branches))
	for _, b := range s.branches {
		out = append(out, BranchInfo{Name: b.Name, Parent: b.Parent, Stale: b.stale, Depth: len(b.chain), Quota: b.Quota})
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Name == Main) != (out[j].Name == Main) {
			return out[i].Name == Main
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Branch returns the named branch.
func (s *Store) Branch(name string) (*Branch, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.branch(name)
}

func (s *Store) branch(name string) (*Branch, error) {
	b, ok := s.branches[name]
	if !ok {
		return nil, api.Errorf(api.ErrNotFound, "branch %q", name)
	}
	return b, nil
}

// ValidName checks a branch name: non-empty, at most 128 bytes, no '/', no
// NUL, not "." or "..", not starting with '@' or ".wh.".
func ValidName(name string) error {
	switch {
	case name == "" || len(name) > 127:
		return api.Errorf(api.ErrBadRequest, "branch name %q: must be 1-127 bytes", name)
	case strings.ContainsAny(name, "/\x00") || name == "." || name == "..":
		return api.Errorf(api.ErrBadRequest, "branch name %q: must not contain '/' or NUL or be . or ..", name)
	case strings.HasPrefix(name, "@") || strings.HasPrefix(name, whPrefix):
		return api.Errorf(api.ErrBadRequest, "branch name %q: must not start with '@' or %q", name, whPrefix)
	}
	return nil
}

// Fork makes children of parent, each seeing the parent's current files. It
// costs the same whatever the size of the base: it writes only metadata.
func (s *Store) Fork(parent string, children ...string) error {
	if len(children) == 0 {
		return api.Errorf(api.ErrBadRequest, "fork %s: no children named", parent)
	}
	seen := map[string]bool{}
	for _, c := range children {
		if err := ValidName(c); err != nil {
			return err
		}
		if seen[c] {
			return api.Errorf(api.ErrBadRequest, "fork %s: child %q named twice", parent, c)
		}
		seen[c] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirsChanged()
	p, err := s.branch(parent)
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	if p.stale {
		return api.Errorf(api.ErrStale, "fork %s: the branch is stale", parent)
	}
	if err := s.busyMain(p); err != nil {
		return fmt.Errorf("fork %s: %w", parent, err)
	}
	for _, c := range children {
		if _, ok := s.branches[c]; ok {
			return api.Errorf(api.ErrExists, "fork %s: branch %q", parent, c)
		}
	}
	saveNext, saveGen := s.nextID, p.gen
	oldChain := p.chain
	var snap *layer
	var base []*layer // the children's chain below their heads
	switch {
	case p.Name == Main:
		// Reuse the newest snapshot if main has not changed since it was taken.
		for _, b := range s.branches {
			if b.Parent == Main && !b.stale && b.snap != nil && b.snap.empty() && b.forkGen == p.gen &&
				(snap == nil || b.snap.id > snap.id) {
				snap = b.snap
			}
		}
		if snap == nil {
			snap = s.newLayer(1)
		}
		base = []*layer{snap}
	case p.head().empty():
		base = p.chain[:len(p.chain)-1]
	default:
		base = p.chain
		p.chain = append(append([]*layer(nil), p.chain...), s.newLayer(len(p.chain)+1))
	}
	made := make([]*Branch, 0, len(children)+1)
	for _, c := range children {
		chain := append(append(make([]*layer, 0, len(base)+1), base...), s.newLayer(len(base)+1))
		b := &Branch{ID: s.nextID, Name: c, Parent: p.Name, chain: chain, forkGen: p.gen, snap: snap, Quota: p.Quota, forkDepth: len(base)}
		s.nextID++
		if h := p.head(); h != nil {
			b.forkHead = h.id
		}
		made = append(made, b)
	}
	if err := s.save(append(made, p), nil, nil); err != nil {
		s.nextID, p.gen, p.chain = saveNext, saveGen, oldChain
		return fmt.Errorf("fork %s: %w", parent, err)
	}
	if len(p.chain) > len(oldChain) {
		p.head().refs++ // p's new head
	}
	for _, b := range made {
		s.branches[b.Name] = b
		s.hold(b)
	}
	p.kids = append(p.kids, made...)
	if err := s.keepWriters(p, oldChain, snap); err != nil {
		// The children would share a writer's file: they go, and the fork
		// fails. What keepWriters did keep stays (a copy in the snapshot,
		// an inode moved up to p's head), which p's view does not change.
		err = fmt.Errorf("fork %s: keep a file open for writing apart: %w", parent, err)
		if uerr := s.dropLocked(made); uerr != nil {
			err = fmt.Errorf("%w; and removing the children failed: %w", err, uerr)
		}
		return err
	}
	return nil
}

// keepWriters runs after p forked: a descriptor that p holds open for
// writing must not write into what the children now see. In main the file is
// preserved into the snapshot by copy; in a frozen head the inode moves up to
// p's new head (the descriptor follows it) and the frozen layer gets a copy.
//
// Each file so kept is remembered with its signature: if it is still
// unchanged when a child commits, the parent did not change (a descriptor
// whose close(2) had returned but whose FUSE release had not yet arrived is
// such a writer, and must not make the fork's commit stale).
func (s *Store) keepWriters(p *Branch, oldChain []*layer, snap *layer) error {
	if len(s.writers) == 0 {
		return nil
	}
	if p.Name == Main {
		for real := range s.writers {
			if rel, ok := relTo(s.base, real); ok {
				var st unix.Stat_t
				if err := s.Lstat(real, &st); errors.Is(err, unix.ENOENT) {
					// Removed while open (or its release has not come yet):
					// its writes reach an inode nobody can see.
					continue
				}
				_, had := s.get(snap, rel)
				if err := s.preserve(rel, false); err != nil {
					return fmt.Errorf("preserve %s: %w", rel, err)
				}
				if !had {
					s.keep(snap, rel, real)
					s.saveKept(snap, rel)
				}
			}
		}
		return nil
	}
	if len(oldChain) == len(p.chain) {
		return nil // the head was empty: nothing was frozen
	}
	frozen, head := oldChain[len(oldChain)-1], p.head()
	for real := range s.writers {
		rel, ok := relTo(frozen.dir, real)
		if !ok {
			continue
		}
		e, ok := s.get(frozen, rel)
		if !ok || e.kind != kFile {
			continue
		}
		var st unix.Stat_t
		if err := s.ensureParent(p, rel); err != nil {
			return fmt.Errorf("keep %s: %w", rel, err)
		}
		if err := s.Lstat(real, &st); err != nil {
			return fmt.Errorf("keep %s: %w", rel, err)
		}
		dst := head.real(rel)
		// Was the file still as an earlier fork kept it? Then the copy left
		// in the frozen layer is unchanged too; otherwise the layer changed.
		prev, wasKept := frozen.kept[rel]
		stillKept := wasKept && s.sigOf(real) == prev
		if err := s.moveOut(real, dst, &st, ""); err != nil {
			return fmt.Errorf("keep %s: %w", rel, err)
		}
		ino := e.ino
		if ino == 0 {
			ino = st.Ino
		}
		s.setIno(real, ino)
		s.setIno(dst, ino)
		s.put(frozen, rel, kFile, false, ino)
		s.put(head, rel, kFile, false, ino)
		s.keep(head, rel, dst)
		s.saveKept(head, rel)
		if stillKept {
			s.keep(frozen, rel, real)
		} else if wasKept {
			delete(frozen.kept, rel)
		}
		if wasKept {
			s.saveKept(frozen, rel)
		}
		s.moveWriter(real, dst)
	}
	return nil
}

func relTo(dir, p string) (string, bool) {
	if p == dir {
		return "", true
	}
	if strings.HasPrefix(p, dir+"/") {
		return p[len(dir)+1:], true
	}
	return "", false
}

// changedSince reports whether p changed since child's fork.
func (s *Store) changedSince(p, child *Branch) bool {
	if p.gen != child.forkGen {
		return true
	}
	if p.Name == Main {
		return child.snap != nil && !s.onlyKept(child.snap, func(rel string) string { return s.base + "/" + rel })
	}
	// Every layer of the parent from the head the fork left (frozen since
	// by later forks, or still the head) up must hold only files kept for
	// writers, unchanged.
	for i, l := range p.chain {
		if l.id != child.forkHead {
			continue
		}
		for _, u := range p.chain[i:] {
			if !s.onlyKept(u, u.real) {
				return true
			}
		}
		return false
	}
	return true
}

// onlyKept reports whether layer l holds nothing but files kept for their
// writers at a fork (and their parent directories), each still unchanged at
// live(rel): the branch it belongs to has not changed.
func (s *Store) onlyKept(l *layer, live func(rel string) string) bool {
	if l.empty() {
		return true
	}
	if len(l.kept) == 0 {
		return false
	}
	for p := range l.paths {
		if sig, ok := l.kept[p]; ok {
			if s.sigOf(live(p)) != sig {
				return false
			}
			continue
		}
		e, _ := s.get(l, p)
		if e.kind != kDir {
			return false
		}
		parent := false
		for k := range l.kept {
			if p == "" || strings.HasPrefix(k, p+"/") {
				parent = true
				break
			}
		}
		if !parent {
			return false
		}
	}
	return true
}

// descendants returns every branch under b, b excluded. A parent is always
// older (a smaller ID) than its children: a branch whose parent was
// committed away and whose parent's name was then reused does not become
// the child of the new branch of that name.
func (s *Store) descendants(b *Branch) []*Branch {
	// Breadth first over the children lists: O(subtree), whatever the
	// number of branches.
	var out []*Branch
	for q := []*Branch{b}; len(q) > 0; q = q[1:] {
		out = append(out, q[0].kids...)
		q = append(q, q[0].kids...)
	}
	return out
}

// unlink removes b from its parent's children (b is committed or aborted).
func (s *Store) unlink(b *Branch) {
	p := s.branches[b.Parent]
	if p == nil {
		return
	}
	for i, c := range p.kids {
		if c == b {
			p.kids = append(p.kids[:i:i], p.kids[i+1:]...)
			return
		}
	}
}

// Abort drops the branch and its subtree. It returns at once; the layers are
// reclaimed in the background.
func (s *Store) Abort(name string) error {
	if name == Main {
		return api.Errorf(api.ErrBadRequest, "abort: main cannot be aborted")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirsChanged()
	b, err := s.branch(name)
	if err != nil {
		return fmt.Errorf("abort: %w", err)
	}
	for _, d := range append(s.descendants(b), b) {
		if d.committing {
			return api.Errorf(api.ErrBusy, "abort %s: the commit of %s into main is half applied; commit %s again to finish it (its files are what it needs)", name, d.Name, d.Name)
		}
	}
	if err := s.dropLocked(append(s.descendants(b), b)); err != nil {
		return fmt.Errorf("abort %s: %w", name, err)
	}
	return nil
}

// dropLocked removes the branches drop (whole subtrees: every descendant of
// one is in it too) in one transaction, and frees their layers in the
// background. The caller holds s.mu.
func (s *Store) dropLocked(drop []*Branch) error {
	names := make([]string, len(drop))
	in := make(map[*Branch]bool, len(drop))
	for i, d := range drop {
		names[i] = d.Name
		in[d] = true
	}
	if err := s.save(nil, names, nil); err != nil {
		return err
	}
	for _, d := range drop {
		if p := s.branches[d.Parent]; p != nil && !in[p] {
			s.unlink(d)
		}
	}
	var freed []*layer
	for _, d := range drop {
		d.gone = true
		delete(s.branches, d.Name)
		freed = s.release(d, freed)
		s.Publish(Event{Branch: d.Name, All: true})
	}
	s.free(freed)
	return nil
}

// Subtree reports the names of the branches Abort(name) would drop: the branch
// and its subtree.
func (s *Store) Subtree(name string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.branches[name]
	if !ok {
		return nil
	}
	out := []string{name}
	for _, d := range s.descendants(b) {
		out = append(out, d.Name)
	}
	return out
}

// Layers are reference counted: layer.refs is the number of branches (not
// gone; a stale one keeps its layers until it is aborted) whose chain or snapshot holds it, kept by hold and
// release, so that a commit or an abort frees what it dropped in time of the
// chains it touched, not of every branch's chain (reclaimLocked, at Open).

// refLayers are the layers b holds: its chain, and its snapshot.
func (b *Branch) refLayers() []*layer {
	if b.snap != nil && (len(b.chain) == 0 || b.chain[0] != b.snap) {
		return append(append([]*layer(nil), b.chain...), b.snap)
	}
	return b.chain
}

// hold counts b's references.
func (s *Store) hold(b *Branch) {
	for _, l := range b.refLayers() {
		l.refs++
	}
}

// release drops the references of b (or of layers that b held) and appends
// the layers left unreferenced to freed.
func (s *Store) release(b *Branch, freed []*layer) []*layer {
	return s.releaseLayers(b.refLayers(), freed)
}

func (s *Store) releaseLayers(ls []*layer, freed []*layer) []*layer {
	for _, l := range ls {
		if l.refs--; l.refs <= 0 {
			freed = append(freed, l)
		}
	}
	return freed
}

// free removes the layers of freed still unreferenced from the index; their
// directories are removed in the background (and at Open, if a crash comes
// first: no record names them).
func (s *Store) free(freed []*layer) {
	for _, l := range freed {
		if l.refs > 0 || s.layers[l.id] != l {
			continue
		}
		delete(s.layers, l.id)
		s.unindexLayer(l)
		if l.made {
			s.removeLater(l.dir)
		}
	}
}

// reclaim removes layers no branch references (at Open).
func (s *Store) reclaim() {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Trash first: reclaimLocked below schedules the removal of what it
	// moves there itself.
	trash, _ := os.ReadDir(filepath.Join(s.dir, "trash"))
	for _, e := range trash {
		s.removeLater(filepath.Join(s.dir, "trash", e.Name()))
	}
	s.forgetConflicts()
	// Copies a crash left aside in the middle of moveOut.
	s.removeAll(s.tmpDir())
	s.reclaimLocked()
	// Layer directories with no record at all (a crash between making a
	// layer and saving the branch that owns it).
	ents, _ := os.ReadDir(filepath.Join(s.dir, "layers"))
	for _, e := range ents {
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if _, ok := s.layers[id]; err != nil || !ok {
			s.removeLater(filepath.Join(s.dir, "layers", e.Name()))
		}
	}
}

// reclaimLocked drops every layer no live branch references: its index
// entries at once, its directory in the background.
func (s *Store) reclaimLocked() {
	// Mark the layers in use with a fresh stamp (no set to build: the
	// chains of a deep tree hold branches × depth references).
	s.markGen++
	used := s.markGen
	for _, b := range s.branches {
		for _, l := range b.chain {
			l.mark = used
		}
		if b.snap != nil {
			b.snap.mark = used
		}
	}
	for id, l := range s.layers {
		if l.mark == used {
			continue
		}
		delete(s.layers, id)
		s.unindexLayer(l)
		if l.made {
			// No syscall here: the directory is removed in the background,
			// and a layer directory no record names is removed at Open.
			s.removeLater(l.dir)
		}
	}
}

// tmpDir holds copies being made (see moveOut), on Dir's filesystem.
func (s *Store) tmpDir() string { return filepath.Join(s.dir, "tmp") }

func (s *Store) removeLater(path string) {
	s.gc.Add(1)
	go func() {
		defer s.gc.Done()
		if err := s.removeAll(path); err != nil {
			s.log.Warn("reclaim", "path", path, "err", err)
		}
	}()
}

func itob(v uint64) []byte { return []byte(strconv.FormatUint(v, 10)) }
func btoi(b []byte) uint64 {
	v, _ := strconv.ParseUint(string(b), 10, 64)
	return v
}
