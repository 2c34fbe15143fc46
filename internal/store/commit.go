package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/arbor-dev/arbor/api"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// op is one step of a commit into main, as journaled. Each is idempotent,
// so a replay after a crash applies the rest and redoes nothing wrong.
type op struct {
	Kind   string `json:"k"` // replace, dir, delete
	Path   string `json:"p"`
	Src    string `json:"s,omitempty"`
	Opaque bool   `json:"o,omitempty"`
}

// journal is a commit into main in flight.
type journal struct {
	Child string `json:"child"`
	Ops   []op   `json:"ops"`
}

var keyJournal = []byte("commit")

// CommitResult says what a commit did.
type CommitResult struct {
	Parent string
	Stale  []string // branches that became stale
}

// Commit applies child's changes to its parent. It fails with ESTALE
// (wrapping api.ErrStale) if the parent changed since child's fork; the child
// is then kept for the caller to abort. durable makes the commit reach the
// disk before it returns: the metadata, and for a commit into main its
// journal and the changed files.
//
// A commit into main is decided under the store's lock (planned, journaled,
// its siblings made stale) and applied to the base without it: lookups and
// opens go on meanwhile (STYLE.md rule 18). While it is applied main's view
// changes path by path; the child answers ESTALE (its files are moving into
// the base: read them in main) and every other branch is stale already.
func (s *Store) Commit(child string, durable bool) (CommitResult, error) {
	return s.commit(child, durable, false)
}

// CommitOver is Commit into a parent other than main that takes child's
// view whatever the parent did since child's fork: the parent's own
// changes since are dropped, not a reason to refuse. It is for state that
// follows its winner whole (the jail backend's /tmp: after a commit the
// parent's /tmp is the child's), where first-commit-wins would refuse a
// commit whose files already committed. O(1) like a commit into a branch;
// a parent that is main is refused (api.ErrBadRequest).
func (s *Store) CommitOver(child string, durable bool) (CommitResult, error) {
	return s.commit(child, durable, true)
}

func (s *Store) commit(child string, durable, over bool) (CommitResult, error) {
	if child == Main {
		return CommitResult{}, api.Errorf(api.ErrBadRequest, "commit: main has no parent")
	}
	s.mu.Lock()
	res, m, err := s.commitLocked(child, durable, over)
	if m != nil {
		s.applies.Add(1)
	}
	s.mu.Unlock()
	if err != nil || m == nil {
		return res, err
	}
	defer s.applies.Done()
	return res, s.applyMain(m, durable)
}

// mainCommit is a commit into main decided under the lock, to apply
// without it.
type mainCommit struct {
	c     *Branch
	ops   []op
	stale []string
	sync  bool // the journal is still to be synced (durable)
}

// commitLocked is Commit under s.mu: a commit into a branch is done; one
// into main is decided and returned for applyMain. over is CommitOver's.
func (s *Store) commitLocked(child string, durable, over bool) (CommitResult, *mainCommit, error) {
	s.dirsChanged()
	c, err := s.branch(child)
	if err != nil {
		return CommitResult{}, nil, fmt.Errorf("commit: %w", err)
	}
	if s.pending != nil && s.pending.Child == child {
		if s.applying {
			return CommitResult{}, nil, api.Errorf(api.ErrBusy, "commit %s: it is being applied into main", child)
		}
		// Decided before: finish its journal, not a new plan.
		s.applying = true
		return CommitResult{Parent: Main}, &mainCommit{c: c, ops: s.pending.Ops, sync: false}, nil
	}
	if c.stale {
		return CommitResult{}, nil, api.Errorf(api.ErrStale, "commit %s: the branch is stale (a sibling committed first); abort it", child)
	}
	if err := s.checkResolved(c); err != nil {
		return CommitResult{}, nil, err
	}
	if len(c.kids) > 0 {
		// Commit is leaf-only (as in BranchFS and the engine's trees): the
		// children forked from c's state would be orphaned or made stale by
		// a commit of c, losing their changes without a word.
		names := make([]string, len(c.kids))
		for i, k := range c.kids {
			names[i] = k.Name
		}
		sort.Strings(names)
		return CommitResult{}, nil, fmt.Errorf("%w: %w", api.Errorf(api.ErrState, "commit %s: it has children %s; commit or abort them first (commit is leaf-only)", child, strings.Join(names, ", ")), syscall.EBUSY)
	}
	p, err := s.branch(c.Parent)
	if err != nil {
		return CommitResult{}, nil, fmt.Errorf("commit %s: parent: %w", child, err)
	}
	if p.stale {
		return CommitResult{}, nil, api.Errorf(api.ErrStale, "commit %s: its parent %s is stale", child, p.Name)
	}
	if err := s.busyMain(p); err != nil {
		return CommitResult{}, nil, fmt.Errorf("commit %s: %w", child, err)
	}
	if over && p.Name == Main {
		return CommitResult{}, nil, api.Errorf(api.ErrBadRequest, "commit %s over its parent: the parent is main", child)
	}
	if !over && s.changedSince(p, c) {
		return CommitResult{}, nil, api.Errorf(api.ErrStale, "commit %s: %s changed since %s was forked (first commit wins); abort it", child, p.Name, child)
	}
	res := CommitResult{Parent: p.Name}
	var stale []*Branch
	for _, d := range s.descendants(p) {
		if d != c && !d.stale {
			stale = append(stale, d)
			res.Stale = append(res.Stale, d.Name)
		}
	}
	sort.Strings(res.Stale)
	if p.Name != Main {
		// The parent adopts the child's chain: O(1), nothing moves on disk.
		oldChain, oldGen := p.chain, p.gen
		p.chain, p.gen = c.chain, p.gen+1
		for _, d := range stale {
			d.stale = true
		}
		if err := s.save(append(stale, p), []string{c.Name}, nil); err != nil {
			p.chain, p.gen = oldChain, oldGen
			for _, d := range stale {
				d.stale = false
			}
			return CommitResult{}, nil, fmt.Errorf("commit %s: %w", child, err)
		}
		c.gone = true
		paths := ownPaths(c)
		if over {
			paths = nil // what the parent changed since goes too: all of it may differ
		}
		s.publishCommit(p.Name, c.Name, paths, res.Stale)
		// p holds c's chain now, c nothing; the stale ones keep theirs
		// until they are aborted.
		s.hold(p)
		freed := s.releaseLayers(refLayersOf(oldChain, p.snap), nil)
		freed = s.release(c, freed)
		if durable {
			if err := s.db.Sync(); err != nil {
				s.unlink(c)
				delete(s.branches, c.Name)
				s.free(freed)
				return res, nil, fmt.Errorf("commit %s: sync: %w", child, err)
			}
		}
		s.unlink(c)
		delete(s.branches, c.Name)
		s.free(freed)
		return res, nil, nil
	}
	ops, err := s.plan(c)
	if err != nil {
		return CommitResult{}, nil, fmt.Errorf("commit %s: plan: %w", child, err)
	}
	j, err := json.Marshal(journal{Child: c.Name, Ops: ops})
	if err != nil {
		return CommitResult{}, nil, err
	}
	// The journal and the siblings' staleness in one transaction: from here
	// on the commit is decided, and no other branch may read a base that
	// is half changed.
	var snaps []*layer // the snapshots the branches made stale read
	for _, d := range stale {
		if d.snap != nil && !slices.Contains(snaps, d.snap) {
			snaps = append(snaps, d.snap)
		}
	}
	for _, d := range stale {
		d.stale = true
	}
	if err := s.save(stale, nil, func(tx *bolt.Tx) error { return tx.Bucket(bucketJournal).Put(keyJournal, j) }); err != nil {
		for _, d := range stale {
			d.stale = false
		}
		return CommitResult{}, nil, fmt.Errorf("commit %s: journal: %w", child, err)
	}
	// The branches made stale keep their view of main as it was (they can
	// be read, diffed and rebased): what the commit is about to change is
	// preserved into their snapshots first. The commit is decided already
	// and must go on: a failure here (or a crash, after which the journal
	// is replayed) leaves the stale branches main's new state for the paths
	// not kept, which is said in the log; the commit's own promise holds.
	if err := s.preserveFor(snaps, ops); err != nil {
		s.log.Warn("commit: the stale branches' view of main not kept whole", "child", c.Name, "err", err)
	}
	s.pending = &journal{Child: c.Name, Ops: ops}
	c.committing = true
	s.applying = true
	return res, &mainCommit{c: c, ops: ops, stale: res.Stale, sync: durable}, nil
}

// preserveFor keeps, in the snapshots snaps, main's current state of every
// path ops will change. A file the commit replaces or deletes whole is
// kept by a hard link (the commit only takes its name away); one whose
// metadata alone changes, by a metadata-only copy (its data stays where it
// is); one written in place (a hard-linked file), by a copy; a directory,
// as preserve keeps it.
func (s *Store) preserveFor(snaps []*layer, ops []op) error {
	if len(snaps) == 0 {
		return nil
	}
	for _, o := range ops {
		if o.Path == "" {
			continue
		}
		real := s.base + "/" + o.Path
		var st unix.Stat_t
		if s.Lstat(real, &st) != nil {
			// The commit adds it: hidden from the snapshots (a whiteout).
			if err := s.preserveInto(snaps, o.Path, false); err != nil {
				return err
			}
			continue
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if isDir {
			if err := s.preserveInto(snaps, o.Path, o.Kind == "delete"); err != nil {
				return err
			}
			continue
		}
		for _, l := range snaps {
			if s.covered(l, o.Path, false) {
				continue
			}
			if err := s.ensureParentIn(l, o.Path); err != nil {
				return err
			}
			dst := l.real(o.Path)
			var err error
			switch {
			case o.Kind == "meta":
				if err = s.copyEmpty(real, dst, &st); err == nil {
					err = s.Setxattr(dst, metaXattr, []byte("1"), 0)
				}
			case (o.Kind == "replace" || o.Kind == "delete") && st.Nlink == 1 && len(s.writers[real]) == 0:
				err = s.link(real, dst) // no writer of main's can change it after
			default:
				err = s.copyNode(real, dst, &st)
			}
			if err != nil {
				return err
			}
			s.setIno(dst, st.Ino)
			s.put(l, o.Path, kFile, false, st.Ino)
			if o.Kind == "meta" {
				s.setMeta(l, o.Path)
			}
		}
	}
	return nil
}

// applyMain applies a decided commit into main to the base, without the
// store's lock, and records it done under it. A failure leaves it pending
// (halfDone). The fsyncs (the journal's, the files', the metadata's) are
// made without the lock too.
func (s *Store) applyMain(m *mainCommit, durable bool) error {
	var moved [][2]string
	err := func() error {
		if m.sync {
			if err := s.db.Sync(); err != nil {
				return fmt.Errorf("journal sync: %w", err)
			}
		}
		crashPoint("journaled")
		var err error
		moved, err = s.apply(m.ops, durable)
		return err
	}()
	s.mu.Lock()
	s.applying = false
	for _, mv := range moved {
		s.moveWriters(mv[0], mv[1], false) // a descriptor still open on it writes the base now
	}
	if err != nil {
		err = s.halfDone(m.c, m.ops, err)
		s.mu.Unlock()
		return err
	}
	crashPoint("applied")
	if err := s.finishMain(m.c.Name); err != nil {
		err = s.halfDone(m.c, m.ops, err)
		s.mu.Unlock()
		return err
	}
	s.pending = nil
	paths := make([]string, len(m.ops))
	for i, o := range m.ops {
		paths[i] = o.Path
	}
	s.publishCommit(Main, m.c.Name, paths, m.stale)
	s.mu.Unlock()
	if durable {
		if err := s.db.Sync(); err != nil {
			return fmt.Errorf("commit %s: sync: %w", m.c.Name, err)
		}
	}
	return nil
}

// halfDone records that c's decided commit into main did not wholly apply:
// every step is idempotent and the journal holds them all, so a Commit of
// c again (or the replay at the next Open) finishes it; until then c
// refuses changes and abort (its files are the journal's sources), and
// main forks and commits nothing else. Nothing is lost, and the caller is
// told.
func (s *Store) halfDone(c *Branch, ops []op, err error) error {
	s.pending = &journal{Child: c.Name, Ops: ops}
	c.committing = true
	return fmt.Errorf("%w: %w", api.Errorf(api.ErrBusy, "commit %s: decided but half applied (commit %s again to finish it; nothing is lost)", c.Name, c.Name), err)
}

// busyMain refuses a fork or commit of main while a commit into it is
// half applied.
func (s *Store) busyMain(p *Branch) error {
	if p.committing {
		return api.Errorf(api.ErrBusy, "%s is being committed into main", p.Name)
	}
	if s.pending == nil || p.Name != Main {
		return nil
	}
	return api.Errorf(api.ErrBusy, "the commit of %s into main is half applied; commit %s again to finish it first", s.pending.Child, s.pending.Child)
}

// ownPaths lists the paths of the layers c made since its fork: what a commit
// of c changes in its parent's view.
func ownPaths(c *Branch) []string {
	var out []string
	for _, l := range c.chain[c.forkDepth:] {
		for p := range l.paths {
			if len(out) > maxCommitPaths {
				return nil
			}
			out = append(out, p)
		}
	}
	return out
}

// finishMain records a commit into main as done: the child is gone, every
// other branch is stale, the journal is cleared.
func (s *Store) finishMain(child string) error {
	m := s.branches[Main]
	m.gen++
	var stale []*Branch
	for _, b := range s.branches {
		if b.Name != Main && b.Name != child && !b.stale {
			b.stale = true
			stale = append(stale, b)
		}
	}
	err := s.save(stale, []string{child}, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).Delete(keyJournal)
	})
	if err != nil {
		m.gen--
		for _, b := range stale {
			b.stale = false
		}
		return err
	}
	var freed []*layer
	if c := s.branches[child]; c != nil {
		c.gone = true
		freed = s.release(c, freed)
	}
	if c := s.branches[child]; c != nil {
		s.unlink(c)
	}
	delete(s.branches, child)
	s.free(freed)
	return nil
}

// refLayersOf is Branch.refLayers of a chain and snapshot.
func refLayersOf(chain []*layer, snap *layer) []*layer {
	return (&Branch{chain: chain, snap: snap}).refLayers()
}

// plan lists the steps that make the base show child's view, in path order
// (parents first).
func (s *Store) plan(c *Branch) ([]op, error) {
	paths := map[string]bool{}
	for _, l := range c.chain {
		if l == c.snap {
			continue
		}
		for p := range l.paths {
			paths[p] = true
		}
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	var ops []op
	done := map[string]bool{} // paths replaced or deleted whole: skip what is under them
	under := func(p string) bool {
		for d := p; d != ""; {
			d, _ = splitRel(d)
			if done[d] && d != "" {
				return true
			}
			if d == "" {
				return false
			}
		}
		return false
	}
	for _, p := range sorted {
		if under(p) {
			continue
		}
		res, err := s.resolve(c, p, len(c.chain))
		switch {
		case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR):
			if p == "" {
				continue
			}
			if s.exists(s.base + "/" + p) {
				ops = append(ops, op{Kind: "delete", Path: p})
			}
			done[p] = true
		case err != nil:
			return nil, err
		case res.Depth <= 1:
			// Comes from the base or the snapshot: unchanged.
		case res.Kind == kDir:
			// The base below is hidden (cut above it) when the directory is
			// opaque, or was deleted and made again, in any of the child's layers.
			opaque := res.cut > 0
			ops = append(ops, op{Kind: "dir", Path: p, Src: res.Real, Opaque: opaque})
			if opaque {
				// Opaque: delete what the base has there and the child does not.
				ents, err := s.readDir(c, p, len(c.chain))
				if err != nil {
					return nil, err
				}
				keep := map[string]bool{}
				for _, e := range ents {
					keep[e.Name] = true
				}
				bents, _ := s.readDirents(s.base + "/" + p)
				for _, e := range bents {
					if !keep[e.name] {
						ops = append(ops, op{Kind: "delete", Path: joinRel(p, e.name)})
					}
				}
			}
		case res.Data != "" && res.DataDepth == 0:
			// A metadata-only copy-up of a base file: its metadata goes
			// onto the base's file, its data stays as it is.
			ops = append(ops, op{Kind: "meta", Path: p, Src: res.Real})
			done[p] = true
		default:
			if res.Data != "" {
				// Metadata only, over data of a layer above the base: the
				// base needs the data too (a whole copy in the child's head).
				if _, err := s.copyUpWith(c, p, false, nil); err != nil {
					return nil, err
				}
				if res, err = s.resolve(c, p, len(c.chain)); err != nil {
					return nil, err
				}
			}
			kind := "replace"
			if res.Nlink > 1 && res.Ino != 0 {
				// The copy of a hard-linked base file: write it into the
				// base's inode, so that all of the base's names see it.
				var bst unix.Stat_t
				if s.Lstat(s.base+"/"+p, &bst) == nil && bst.Ino == res.Ino && bst.Mode&unix.S_IFMT == unix.S_IFREG {
					kind = "inplace"
				}
			}
			ops = append(ops, op{Kind: kind, Path: p, Src: res.Real})
			done[p] = true
		}
	}
	return ops, nil
}

// apply runs the steps against the base directory. Every path is walked
// beneath the base's descriptor and the store's (beneath.go), so a
// directory of the base swapped for a symlink, or exchanged with one by
// RENAME_EXCHANGE, mid-commit, fails the step (ELOOP) rather than taking a
// write outside the base.
//
// It runs without the store's lock (replayed at Open, with it): the
// descriptors open for writing that a step moves into the base are
// returned as (old, new) real paths, for the caller to re-key under the lock.
func (s *Store) apply(ops []op, durable bool) (moved [][2]string, err error) {
	dirs := map[string]bool{}
	for _, o := range ops {
		if faultApply != nil {
			if err := faultApply(o); err != nil {
				return moved, err
			}
		}
		dst := s.base
		if o.Path != "" {
			dst += "/" + o.Path
		}
		switch o.Kind {
		case "delete":
			if err := s.removeAll(dst); err != nil {
				return moved, err
			}
		case "dir":
			var st unix.Stat_t
			if err := s.Lstat(o.Src, &st); err != nil {
				if os.IsNotExist(err) {
					continue // applied already
				}
				return moved, err
			}
			var dt unix.Stat_t
			if err := s.Lstat(dst, &dt); err == nil && dt.Mode&unix.S_IFMT != unix.S_IFDIR {
				if err := s.unlinkPath(dst); err != nil {
					return moved, err
				}
			}
			if err := s.mkdir(dst, 0o700); err != nil && err != unix.EEXIST {
				return moved, err
			}
			if err := s.Lstat(dst, &dt); err != nil {
				return moved, err
			}
			if dt.Mode&unix.S_IFMT != unix.S_IFDIR {
				return moved, notType(dst, "a directory", &dt)
			}
			if err := s.copyMeta(o.Src, dst, &st); err != nil {
				return moved, err
			}
		case "replace":
			done, err := s.replace(o.Src, dst, durable)
			if err != nil {
				return moved, err
			}
			if !done {
				continue // moved already
			}
			moved = append(moved, [2]string{o.Src, dst})
		case "meta":
			var st unix.Stat_t
			if err := s.Lstat(o.Src, &st); err != nil {
				return moved, err
			}
			if err := s.copyMetaExact(o.Src, dst, &st); err != nil {
				return moved, err
			}
		case "inplace":
			var st unix.Stat_t
			if err := s.Lstat(o.Src, &st); err != nil {
				if os.IsNotExist(err) {
					continue // written and removed already
				}
				return moved, err
			}
			if err := s.copyInto(o.Src, dst, &st, durable); err != nil {
				return moved, err
			}
			if err := s.unlinkPath(o.Src); err != nil && !os.IsNotExist(err) {
				return moved, err
			}
		}
		d, _ := splitRel(o.Path)
		dirs[d] = true
	}
	if durable {
		for d := range dirs {
			if err := s.Fsync(joinRel(s.base, d)); err != nil {
				return moved, err
			}
		}
	}
	return moved, nil
}

// replayJournal finishes a commit into main that a crash cut short.
func (s *Store) replayJournal() error {
	var j journal
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketJournal).Get(keyJournal)
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &j)
	})
	if err != nil || !found {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log.Info("replaying an interrupted commit", "child", j.Child, "ops", len(j.Ops))
	moved, err := s.apply(j.Ops, true)
	for _, mv := range moved {
		s.moveWriters(mv[0], mv[1], false)
	}
	if err != nil {
		c := s.branches[j.Child]
		if c == nil {
			return fmt.Errorf("store: replay commit of %s: %w", j.Child, err)
		}
		// Left pending: a Commit of the child again finishes it.
		s.log.Warn("an interrupted commit into main is still half applied; commit its branch again to finish it",
			"child", j.Child, "err", s.halfDone(c, j.Ops, err))
		return nil
	}
	if err := s.finishMain(j.Child); err != nil {
		return err
	}
	return s.db.Sync()
}

// crashPoint lets the crash tests kill the process at a named point of a
// commit: ARBOR_STORE_CRASH=<point> makes the process SIGKILL itself there.
func crashPoint(name string) {
	if crashAt != "" && crashAt == name {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

var crashAt = os.Getenv("ARBOR_STORE_CRASH")

// faultApply, set by tests only, fails a step of apply (a refused rename,
// a full disk) before it runs.
var faultApply func(op) error

// copyInto writes src's data and metadata into the existing file dst, in
// place (dst keeps its inode, so every name of it sees the change).
// replace moves the layer's file src over the base's dst (a directory
// there goes first), both walked once to their parents, and reports
// whether it moved it (false: src is gone, moved by an earlier run).
func (s *Store) replace(src, dst string, durable bool) (done bool, err error) {
	err = s.inParent(src, func(sdir int, sname string) error {
		return s.inParent(dst, func(ddir int, dname string) error {
			var st unix.Stat_t
			if err := unix.Fstatat(sdir, sname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if err == unix.ENOENT {
					return nil
				}
				return err
			}
			var dt unix.Stat_t
			if unix.Fstatat(ddir, dname, &dt, unix.AT_SYMLINK_NOFOLLOW) == nil && dt.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := removeAt(ddir, dname); err != nil {
					return err
				}
			}
			if fd, err := unix.Openat(sdir, sname, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
				unix.Removexattr(procPath(fd), inoXattr)
				unix.Close(fd)
			}
			if err := unix.Renameat2(sdir, sname, ddir, dname, 0); err != nil {
				if err != unix.EXDEV {
					return err
				}
				tmp := dst + ".arbor-commit"
				s.unlinkPath(tmp)
				if err := s.copyNode(src, tmp, &st); err != nil {
					return err
				}
				if err := s.rename(tmp, dst, 0); err != nil {
					return err
				}
			}
			done = true
			if !durable || st.Mode&unix.S_IFMT != unix.S_IFREG {
				return nil
			}
			fd, err := unix.Openat(ddir, dname, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fsync(fd)
		})
	})
	return done, err
}

func (s *Store) copyInto(src, dst string, st *unix.Stat_t, durable bool) error {
	in, err := s.openFile(src, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer unix.Close(in)
	out, err := s.openFile(dst, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	err = copyExtents(in, out)
	if err == nil && durable {
		err = unix.Fsync(out)
	}
	if cerr := unix.Close(out); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return s.copyMeta(src, dst, st)
}
