package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/merge"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// Rebase. Replay re-applies a branch's changes (against its fork point)
// onto another branch, a fresh fork of the first one's parent's new state:
// the missing half of first-commit-wins for a loser that wants to keep its
// work. Per path, with base the fork point's version, ours the branch's and
// theirs the target's:
//
//   - one side changed it: that side's version;
//   - both made the same change: it;
//   - both changed a regular text file: a three-way line merge (package
//     merge); overlapping changes leave conflict markers;
//   - both made it a directory: theirs stays, ours' entries are replayed;
//   - both changed it otherwise (binary, a symlink, a type change): ours at
//     the path and theirs beside it at PATH~theirs, moved as it is (a
//     symlink is never followed); but a directory of theirs stays, and ours
//     goes to PATH~ours;
//   - a directory above one of ours' paths that theirs deleted is made
//     again; one theirs made a file or a symlink goes to PATH~theirs (a
//     conflict) and ours' directory takes the path;
//   - deleted on one side, changed on the other: the change is kept;
//   - a directory ours deleted (or made a file or a symlink) goes only if
//     theirs left all of it as it was, and so do the base's entries a
//     directory ours made anew no longer has;
//   - PATH~theirs (~ours) taken on either side: PATH~theirs.1, .2, ...;
//     the conflict names the one used.
//
// The conflicts are recorded with the target, durably; its commit is
// refused (api.ErrState) while one is unresolved: a text file still holding
// a conflict marker line, or a PATH~theirs / PATH~ours still there.

// Conflict is one path a Replay could not merge by itself.
type Conflict struct {
	Path string `json:"path"`
	// Kind: "text" (markers in the file), "both" (theirs at Path~theirs),
	// "type" (ours at Path~ours, or theirs at Path~theirs).
	Kind string `json:"kind"`
	// Aside is the path holding the other version ("" for text).
	Aside string `json:"aside,omitempty"`
}

var bucketConflicts = []byte("conflicts") // branch id -> []Conflict as JSON

// mergeMax is the largest text file Replay merges line by line; a larger
// one conflicts as a binary file does.
const mergeMax = 8 << 20

// Replay applies from's changes onto into (see above) and returns the
// conflicts it left. from may be stale; into must be a live branch other
// than main.
func (s *Store) Replay(from, into string) ([]Conflict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirsChanged()
	f, err := s.forked(from)
	if err != nil {
		return nil, fmt.Errorf("rebase %s: %w", from, err)
	}
	t, err := s.branch(into)
	if err != nil {
		return nil, fmt.Errorf("rebase %s onto %s: %w", from, into, err)
	}
	if t.Name == Main {
		return nil, api.Errorf(api.ErrBadRequest, "rebase %s: onto main: replay onto a fork of it", from)
	}
	if err := writableBranch(t); err != nil {
		return nil, fmt.Errorf("rebase %s onto %s: %w", from, into, err)
	}
	paths := map[string]bool{}
	for _, l := range f.chain[f.forkDepth:] {
		for p := range l.paths {
			if p != "" {
				paths[p] = true
			}
		}
	}
	if err := s.droppedEntries(f, paths); err != nil {
		return nil, fmt.Errorf("rebase %s: %w", from, err)
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted) // parents first
	var conflicts []Conflict
	for _, p := range sorted {
		cs, err := s.replayPath(f, t, p)
		conflicts = append(conflicts, cs...)
		if err != nil {
			return conflicts, fmt.Errorf("rebase %s onto %s: %s: %w", from, into, p, err)
		}
	}
	if err := s.saveConflicts(t, conflicts); err != nil {
		return conflicts, err
	}
	return conflicts, nil
}

// version is one side of a path in Replay.
type version struct {
	res Res
	st  unix.Stat_t
	ok  bool // it exists
}

func (s *Store) versionOf(b *Branch, rel string, depth int) (version, error) {
	var v version
	res, err := s.resolve(b, rel, depth)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
		return v, nil
	}
	if err != nil {
		return v, err
	}
	if err := s.Lstat(res.Real, &v.st); err != nil {
		return v, err
	}
	if err := s.dataStat(res, &v.st); err != nil {
		return v, err
	}
	v.res, v.ok = res, true
	return v, nil
}

func (v version) isDir() bool { return v.ok && v.st.Mode&unix.S_IFMT == unix.S_IFDIR }

// same reports whether two versions are the same object: the same real
// file, or equal content and metadata.
func (s *Store) same(a, b version) bool {
	switch {
	case a.ok != b.ok:
		return false
	case !a.ok:
		return true
	case a.res.DataReal() == b.res.DataReal() && a.res.Real == b.res.Real:
		return true
	case a.st.Mode != b.st.Mode || a.st.Uid != b.st.Uid || a.st.Gid != b.st.Gid:
		return false
	case a.isDir():
		return true
	}
	da, erra := s.content(a)
	db, errb := s.content(b)
	return erra == nil && errb == nil && bytes.Equal(da, db)
}

// content is a file's data (a symlink's target), whole.
func (s *Store) content(v version) ([]byte, error) {
	if v.st.Mode&unix.S_IFMT == unix.S_IFLNK {
		t, err := s.readlink(v.res.Real)
		return []byte(t), err
	}
	if v.st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil // a device or a FIFO: its metadata is all
	}
	fd, err := s.openFile(v.res.DataReal(), unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readAll(fd, v.st.Size, max(v.st.Size, mergeMax))
}

// text reports whether v is a regular file small enough to merge and
// without a NUL byte in it.
func (s *Store) text(v version) ([]byte, bool) {
	if !v.ok {
		return nil, true // absent: no lines
	}
	if v.st.Mode&unix.S_IFMT != unix.S_IFREG || v.st.Size > mergeMax {
		return nil, false
	}
	d, err := s.content(v)
	if err != nil || bytes.IndexByte(d, 0) >= 0 {
		return nil, false
	}
	return d, true
}

// replayPath applies from's change of rel onto into (see Replay).
func (s *Store) replayPath(from, into *Branch, rel string) ([]Conflict, error) {
	base, err := s.versionOf(from, rel, from.forkDepth)
	if err != nil {
		return nil, err
	}
	ours, err := s.versionOf(from, rel, len(from.chain))
	if err != nil {
		return nil, err
	}
	theirs, err := s.versionOf(into, rel, len(into.chain))
	if err != nil {
		return nil, err
	}
	switch {
	case s.same(ours, base), s.same(ours, theirs):
		return nil, nil // nothing of ours to bring, or theirs has it already
	case !ours.ok:
		// Ours deleted it: where theirs changed it (a directory made
		// where there was none is a change), the change stays; a
		// directory goes only if nothing is left in it.
		if !theirs.ok || !s.same(theirs, base) {
			return nil, nil
		}
		if theirs.isDir() {
			if same, err := s.sameTree(from, into, rel); err != nil || !same {
				return nil, err
			}
			return nil, s.removeTree(into, rel)
		}
		return nil, s.remove(into, rel, false)
	}
	// Ours is written at rel (or beside it): its directories first.
	cs, err := s.replayParents(from, into, rel)
	if err != nil {
		return cs, err
	}
	if len(cs) > 0 {
		if theirs, err = s.versionOf(into, rel, len(into.chain)); err != nil {
			return cs, err
		}
	}
	// A directory of theirs ours replaces with something else goes only
	// if theirs left all of it as it was.
	replaceable := !theirs.ok || s.same(theirs, base)
	if replaceable && theirs.isDir() && !ours.isDir() {
		same, err := s.sameTree(from, into, rel)
		if err != nil {
			return cs, err
		}
		if replaceable = same; same {
			if err := s.removeTree(into, rel); err != nil {
				return cs, err
			}
			theirs = version{}
		}
	}
	switch {
	case replaceable:
		// Theirs deleted it (our change stays) or left it as it was.
		return cs, s.install(into, rel, ours, nil)
	case ours.isDir() && theirs.isDir():
		return cs, nil // both changed it: theirs stays, the entries are replayed one by one
	case ours.isDir():
		// Theirs made something else of it: theirs goes beside, ours'
		// directory takes the path and its entries are replayed.
		c, err := s.moveAside(from, into, rel, "~theirs")
		if err != nil {
			return cs, err
		}
		return append(cs, c), s.install(into, rel, ours, nil)
	case theirs.isDir():
		aside, err := s.freeName(from, into, rel, "~ours")
		if err != nil {
			return cs, err
		}
		return append(cs, Conflict{Path: rel, Kind: "type", Aside: aside}), s.install(into, aside, ours, nil)
	}
	// Both changed a file.
	bt, bok := s.text(base)
	ot, ook := s.text(ours)
	tt, tok := s.text(theirs)
	if bok && ook && tok {
		merged, n := merge.Lines(bt, ot, tt, from.Name, into.Name)
		if err := s.install(into, rel, ours, merged); err != nil {
			return cs, err
		}
		if n > 0 {
			return append(cs, Conflict{Path: rel, Kind: "text"}), nil
		}
		return cs, nil
	}
	c, err := s.moveAside(from, into, rel, "~theirs")
	if err != nil {
		return cs, err
	}
	c.Kind = "both"
	if ours.st.Mode&unix.S_IFMT != theirs.st.Mode&unix.S_IFMT {
		c.Kind = "type" // a file against a symlink, a device, a FIFO
	}
	return append(cs, c), s.install(into, rel, ours, nil)
}

// replayParents makes every directory above rel in into a directory, as
// ours has them, before ours is written beneath: one theirs deleted is made
// again (a change beats a delete); one theirs made a file, a symlink or
// anything else goes beside (PATH~theirs, a conflict) and ours' directory
// takes its place. A symlink of theirs is moved, never followed.
func (s *Store) replayParents(from, into *Branch, rel string) ([]Conflict, error) {
	var cs []Conflict
	for i := 0; i < len(rel); i++ {
		if rel[i] != '/' {
			continue
		}
		dir := rel[:i]
		theirs, err := s.versionOf(into, dir, len(into.chain))
		if err != nil {
			return cs, err
		}
		if theirs.isDir() {
			continue
		}
		ours, err := s.versionOf(from, dir, len(from.chain))
		if err != nil {
			return cs, err
		}
		if !ours.isDir() {
			return cs, fmt.Errorf("%s: not a directory in %s: %w", dir, from.Name, syscall.ENOTDIR)
		}
		if theirs.ok {
			c, err := s.moveAside(from, into, dir, "~theirs")
			if err != nil {
				return cs, err
			}
			c.Kind = "type"
			cs = append(cs, c)
		}
		if err := s.install(into, dir, ours, nil); err != nil {
			return cs, err
		}
	}
	return cs, nil
}

// droppedEntries adds to paths the entries of from's base that a
// directory of from's own layers (made anew: opaque) no longer has: ours
// deleted them, although no layer names them.
func (s *Store) droppedEntries(from *Branch, paths map[string]bool) error {
	for p := range paths {
		base, err := s.versionOf(from, p, from.forkDepth)
		if err != nil {
			return err
		}
		ours, err := s.versionOf(from, p, len(from.chain))
		if err != nil {
			return err
		}
		if !base.isDir() || !ours.isDir() {
			continue
		}
		bents, err := s.readDir(from, p, from.forkDepth)
		if err != nil {
			return err
		}
		oents, err := s.readDir(from, p, len(from.chain))
		if err != nil {
			return err
		}
		has := map[string]bool{}
		for _, e := range oents {
			has[e.Name] = true
		}
		for _, e := range bents {
			if !has[e.Name] {
				paths[p+"/"+e.Name] = true
			}
		}
	}
	return nil
}

// sameTree reports whether into's directory rel holds, entry by entry and
// all the way down, what from's base has there.
func (s *Store) sameTree(from, into *Branch, rel string) (bool, error) {
	bents, err := s.readDir(from, rel, from.forkDepth)
	if err != nil {
		return false, err
	}
	tents, err := s.readDir(into, rel, len(into.chain))
	if err != nil || len(bents) != len(tents) {
		return false, err
	}
	for _, e := range tents {
		child := rel + "/" + e.Name
		b, err := s.versionOf(from, child, from.forkDepth)
		if err != nil {
			return false, err
		}
		t, err := s.versionOf(into, child, len(into.chain))
		if err != nil || !s.same(b, t) {
			return false, err
		}
		if t.isDir() {
			if same, err := s.sameTree(from, into, child); err != nil || !same {
				return false, err
			}
		}
	}
	return true, nil
}

// removeTree removes b's rel and everything beneath it (a symlink is
// removed, never followed).
func (s *Store) removeTree(b *Branch, rel string) error {
	ents, err := s.readDir(b, rel, len(b.chain))
	if err != nil {
		return err
	}
	for _, e := range ents {
		child := rel + "/" + e.Name
		if e.Mode == unix.S_IFDIR {
			err = s.removeTree(b, child)
		} else {
			err = s.remove(b, child, false)
		}
		if err != nil {
			return err
		}
	}
	return s.remove(b, rel, true)
}

// install puts v (with data instead of v's own, if not nil) at rel in b,
// replacing what b has there (a directory only if v is one too: then only
// its metadata).
func (s *Store) install(b *Branch, rel string, v version, data []byte) error {
	if err := checkName(rel); err != nil {
		return err
	}
	cur, err := s.versionOf(b, rel, len(b.chain))
	if err != nil {
		return err
	}
	if v.isDir() && cur.isDir() {
		real, err := s.copyUpWith(b, rel, false, nil)
		if err != nil {
			return err
		}
		return s.copyMeta(v.res.Real, real, &v.st)
	}
	if cur.ok {
		if err := s.remove(b, rel, cur.isDir()); err != nil {
			return err
		}
	}
	if err := s.ensureParent(b, rel); err != nil {
		return err
	}
	dst := b.head().real(rel)
	err = s.create(b, rel, v.isDir(), func(int, string) error {
		switch {
		case data != nil:
			if err := s.writeNew(dst, data); err != nil {
				return err
			}
			return s.copyMeta(v.res.Real, dst, &v.st)
		case v.res.Data != "":
			if err := s.copyData(v.res.Data, dst); err != nil {
				return err
			}
			return s.copyMeta(v.res.Real, dst, &v.st)
		}
		return s.copyNode(v.res.Real, dst, &v.st)
	})
	return err
}

// writeNew makes the regular file dst with data.
func (s *Store) writeNew(dst string, data []byte) error {
	fd, err := s.open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	for off := 0; off < len(data); {
		n, err := unix.Write(fd, data[off:])
		if err != nil {
			unix.Close(fd)
			return err
		}
		off += n
	}
	return unix.Close(fd)
}

// moveAside renames rel to a free name (rel+suffix, or with .1, .2, ...
// after it) in into: theirs kept beside ours. The conflict names it.
func (s *Store) moveAside(from, into *Branch, rel, suffix string) (Conflict, error) {
	aside, err := s.freeName(from, into, rel, suffix)
	if err != nil {
		return Conflict{}, err
	}
	return Conflict{Path: rel, Kind: "type", Aside: aside}, s.renameLocked(into, rel, aside, unix.RENAME_NOREPLACE)
}

// asideMax bounds the names freeName tries.
const asideMax = 1000

// freeName is rel+suffix, or rel+suffix+".1", ".2", ...: the first that
// neither into nor from (whose paths are still to be replayed) has. A name
// that would pass NAME_MAX is cut before the suffix.
func (s *Store) freeName(from, into *Branch, rel, suffix string) (string, error) {
	dir, name := splitRel(rel)
	for i := 0; i < asideMax; i++ {
		sfx := suffix
		if i > 0 {
			sfx = fmt.Sprintf("%s.%d", suffix, i)
		}
		n := name
		if len(n)+len(sfx) > unix.NAME_MAX {
			n = n[:unix.NAME_MAX-len(sfx)]
		}
		n = joinRel(dir, n+sfx)
		_, errInto := s.resolve(into, n, len(into.chain))
		_, errFrom := s.resolve(from, n, len(from.chain))
		if errInto != nil && errFrom != nil {
			return n, nil
		}
	}
	return "", fmt.Errorf("%s%s and %d names after it exist: %w", rel, suffix, asideMax-1, syscall.EEXIST)
}

// saveConflicts records b's conflicts (none: forgets them).
func (s *Store) saveConflicts(b *Branch, cs []Conflict) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(bucketConflicts)
		if err != nil {
			return err
		}
		if len(cs) == 0 {
			return bk.Delete(itob(b.ID))
		}
		v, err := json.Marshal(cs)
		if err != nil {
			return err
		}
		return bk.Put(itob(b.ID), v)
	})
	if err != nil {
		return fmt.Errorf("record the conflicts of %s: %w", b.Name, err)
	}
	return nil
}

// forgetConflicts drops the conflict records of branches gone (committed
// or aborted), at Open. A failure leaves them: they name no branch.
func (s *Store) forgetConflicts() {
	live := map[string]bool{}
	for _, b := range s.branches {
		live[string(itob(b.ID))] = true
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketConflicts)
		if bk == nil {
			return nil
		}
		var gone [][]byte
		if err := bk.ForEach(func(k, _ []byte) error {
			if !live[string(k)] {
				gone = append(gone, append([]byte(nil), k...))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range gone {
			if err := bk.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("store: forget the conflicts of gone branches", "err", err)
	}
}

// Conflicts lists branch name's conflicts that are not resolved yet.
func (s *Store) Conflicts(name string) ([]Conflict, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, err := s.branch(name)
	if err != nil {
		return nil, err
	}
	return s.unresolved(b)
}

// unresolved is b's recorded conflicts still unresolved (see Replay).
func (s *Store) unresolved(b *Branch) ([]Conflict, error) {
	var cs []Conflict
	err := s.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketConflicts)
		if bk == nil {
			return nil
		}
		if v := bk.Get(itob(b.ID)); v != nil {
			return json.Unmarshal(v, &cs)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Conflict
	for _, c := range cs {
		if c.Aside != "" {
			if _, err := s.resolve(b, c.Aside, len(b.chain)); err == nil {
				out = append(out, c)
			}
			continue
		}
		v, err := s.versionOf(b, c.Path, len(b.chain))
		if err != nil {
			return nil, err
		}
		if d, ok := s.text(v); ok && merge.HasConflict(d) {
			out = append(out, c)
		}
	}
	return out, nil
}

// checkResolved refuses the commit of b while it has unresolved conflicts.
func (s *Store) checkResolved(b *Branch) error {
	cs, err := s.unresolved(b)
	if err != nil {
		return err
	}
	if len(cs) == 0 {
		return nil
	}
	paths := make([]string, len(cs))
	for i, c := range cs {
		paths[i] = c.Path
	}
	return api.Errorf(api.ErrState, "commit %s: %d unresolved rebase conflicts: %s (remove the conflict markers, and the ~theirs/~ours files once merged)",
		b.Name, len(cs), strings.Join(paths, ", "))
}
