package cowfs

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The kernel caches names, attributes and directory listings for
// Config.CacheTTL. What changes through one view the kernel knows; every
// other view that shows the same branch (the root, /@NAME, /@P/@NAME, in
// this mount and in every other mount of the store) is told: the mounts
// publish each change they make on the store (store.Event), the store
// publishes its commits and aborts, and each mount's notifier turns the
// events into FUSE invalidations of the entries and inodes its kernel
// knows. Invalidations are sent from the notifier's goroutine, never from a
// request: the kernel takes the directory's lock for them, which a request
// in flight may hold.
//
// Two gaps are closed in the requests themselves: a lookup that overlaps an
// event answers uncached (the invalidation may have come before its answer
// reached the kernel), and a regular file open for writing anywhere is
// answered uncached (passthrough writes reach no request).

// defaultCacheTTL is Config.CacheTTL's default.
const defaultCacheTTL = 30 * time.Second

// maxQueued bounds the events waiting for a mount's notifier; past it they
// are dropped and the notifier invalidates everything its kernel knows.
const maxQueued = 4096

// notifier is one mount's consumer of its store's events.
type notifier struct {
	ch       chan store.Event
	overflow atomic.Bool
	gens     [genStripes]atomic.Uint64 // events seen, by stripe of their branch; see lookupGen
	stop     func()
	done     chan struct{}

	mu    sync.Mutex        // guards views
	views map[string]string // the /@NAME view roots looked up: path ("@a", "@a/@b") -> branch
}

func (f *FS) startNotifier() {
	nt := &f.nt
	nt.ch = make(chan store.Event, maxQueued)
	nt.done = make(chan struct{})
	nt.views = map[string]string{}
	nt.stop = f.st.Watch(f.enqueue)
	go f.notifyLoop()
}

// stopNotifier stops the events and waits for the queued ones.
func (f *FS) stopNotifier() {
	f.nt.stop() // no enqueue runs after it returns
	close(f.nt.ch)
	<-f.nt.done
}

// enqueue is the store's callback: it must not block.
func (f *FS) enqueue(ev store.Event) {
	f.nt.gens[stripe(ev.Branch)].Add(1)
	if ev.Attr {
		f.forgetAttrs(ev)
		return
	}
	select {
	case f.nt.ch <- ev:
	default:
		f.nt.overflow.Store(true)
	}
}

// lookupGen is read by a lookup of branch before it resolves; if it moved
// by the time the lookup answers, an event of that branch (or of one sharing
// its stripe) came meanwhile, and the answer must not be cached. Striped, so
// that writes in one branch leave the lookups of the others cached.
func (f *FS) lookupGen(branch string) uint64 { return f.nt.gens[stripe(branch)].Load() }

const genStripes = 64

var stripeSeed = maphash.MakeSeed()

func stripe(branch string) int { return int(maphash.String(stripeSeed, branch) % genStripes) }

func (f *FS) notifyLoop() {
	defer close(f.nt.done)
	for ev := range f.nt.ch {
		if f.nt.overflow.Swap(false) {
			f.invalidateEverything()
			continue
		}
		f.apply(ev)
	}
}

// forgetAttrs makes the kernel forget the attributes of ev.Path in every
// view of ev.Branch it knows, now: a copy-up below it changed them while a
// request (the one that copied up) is in flight. Unlike the notifier's
// invalidations this one is safe from a request: an inode's attributes
// alone (offset -1) are forgotten under no lock of the kernel's that a
// request holds, and no page is touched.
func (f *FS) forgetAttrs(ev store.Event) {
	for _, v := range f.viewsOf(ev.Branch) {
		if in := walk(v, ev.Path); in != nil {
			in.NotifyContent(-1, 0)
		}
	}
}

// addView records a view root of branch at path (under the mount root) for viewsOf.
func (f *FS) addView(path, branch string) {
	f.nt.mu.Lock()
	f.nt.views[path] = branch
	f.nt.mu.Unlock()
}

// viewsOf returns the view roots the kernel knows that show branch.
func (f *FS) viewsOf(branch string) []*fs.Inode {
	var out []*fs.Inode
	if f.Current() == branch {
		out = append(out, f.rootInode())
	}
	f.nt.mu.Lock()
	defer f.nt.mu.Unlock()
	for p, b := range f.nt.views {
		if b != branch {
			continue
		}
		in := walk(f.rootInode(), p)
		if in == nil {
			delete(f.nt.views, p) // forgotten: a new lookup adds it back
			continue
		}
		out = append(out, in)
	}
	return out
}

// walk follows rel from dir through the children the kernel knows.
func walk(dir *fs.Inode, rel string) *fs.Inode {
	for rel != "" && dir != nil {
		name, rest, _ := strings.Cut(rel, "/")
		dir, rel = dir.GetChild(name), rest
	}
	return dir
}

// apply invalidates what ev changed in every view but its origin.
func (f *FS) apply(ev store.Event) {
	for _, v := range f.viewsOf(ev.Branch) {
		if ev.Origin == v {
			continue
		}
		switch {
		case ev.All:
			f.invalidateView(v)
		case ev.Path == "":
			v.NotifyContent(0, 0)
		default:
			dirRel, name := "", ev.Path
			if i := strings.LastIndexByte(ev.Path, '/'); i >= 0 {
				dirRel, name = ev.Path[:i], ev.Path[i+1:]
			}
			dir := walk(v, dirRel)
			if dir == nil {
				continue // nothing of it is known to the kernel
			}
			c := dir.GetChild(name)
			if ev.Entry || (ev.Origin != nil && (c == nil || young(c))) {
				// An entry invalidation waits for the directory's lock,
				// which a lookup holds until its answer is in: a lookup
				// in flight (c not in go-fuse's tree yet) or one that made
				// c just now may not have answered, and an inode
				// invalidation would then miss what it caches. (Not for a
				// writer's release, Origin nil: lookups were answered
				// uncached while it wrote.)
				dir.NotifyEntry(name)
			}
			if ev.Entry {
				dir.NotifyContent(0, 0) // its attributes and cached listing
			}
			if c != nil {
				c.NotifyContent(0, 0)
			}
		}
	}
}

// invalidateView makes the kernel forget everything it knows under view root v.
func (f *FS) invalidateView(v *fs.Inode) {
	var rec func(in *fs.Inode)
	rec = func(in *fs.Inode) {
		for name, c := range in.Children() {
			if name == ctlName || (in == v && strings.HasPrefix(name, "@")) {
				continue // view roots of other branches have events of their own
			}
			rec(c)
			in.NotifyEntry(name)
		}
		in.NotifyContent(0, 0)
	}
	rec(v)
	if v == f.rootInode() {
		f.invalidateRootNames(false) // and the names the root answered as absent
		return
	}
	if vn, ok := v.Operations().(*node); ok {
		for _, name := range vn.takeMisses() {
			v.NotifyEntry(name)
		}
	}
	// And the view root's own name: an aborted branch's is gone.
	if name, parent := v.Parent(); parent != nil {
		parent.NotifyEntry(name)
	}
}

// youngAge: a node made this recently may come from a lookup whose answer
// is still on its way to the kernel.
const youngAge = time.Second

func young(in *fs.Inode) bool {
	n, ok := in.Operations().(*node)
	return ok && time.Since(n.born) < youngAge
}

// missed records that the view root n answered name as absent, which the
// kernel caches: an invalidation of the whole view must reach it. Past
// maxRootNeg names n answers absent names uncached instead.
func (n *node) missed(name string, out *fuse.EntryOut) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.misses) >= maxRootNeg {
		out.SetEntryTimeout(time.Nanosecond)
		return
	}
	if n.misses == nil {
		n.misses = map[string]struct{}{}
	}
	n.misses[name] = struct{}{}
}

func (n *node) takeMisses() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.misses))
	for name := range n.misses {
		out = append(out, name)
	}
	n.misses = nil
	return out
}

// invalidateEverything is invalidateView of every view root.
func (f *FS) invalidateEverything() {
	f.nt.mu.Lock()
	var views []*fs.Inode
	for p := range f.nt.views {
		if in := walk(f.rootInode(), p); in != nil {
			views = append(views, in)
		}
	}
	f.nt.mu.Unlock()
	f.invalidateView(f.rootInode())
	for _, v := range views {
		f.invalidateView(v)
	}
}

// changed publishes a change to rel of b made through n's view.
func (n *node) changed(b *store.Branch, rel string, entry bool) {
	n.fs.st.Publish(store.Event{Branch: b.Name, Path: rel, Entry: entry, Origin: n.root})
}
