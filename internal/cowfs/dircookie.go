package cowfs

import (
	"cmp"
	"context"
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// A directory's READDIR offsets (the cookies the kernel keeps as the
// stream's position, hands back to continue it, and shows as d_off and
// telldir) name a place in the directory, not an index in one listing. A
// listing is rebuilt whenever the kernel reads the directory with no bridge
// handle open (dirFS: at the start, after the kernel dropped its cached
// listing, after another stream of the same directory took the handle), and
// entries removed or added meanwhile shift every index after them: a stream
// continued by index skipped entries, or failed with EINVAL when its index
// was past the end of the shorter listing (rm -r, find -delete and git
// removing while they read). So each entry's cookie is a hash of its name,
// and a listing is served in cookie order: continuing from a cookie in any
// listing of the directory lists exactly the entries after that place,
// whatever was removed or added before it. "." and ".." are 1 and 2.
// Cookies use 63 bits: a 32-bit program's getdents and telldir see them cut
// (ext4 gives such callers 32-bit hashes; a FUSE server cannot tell them).

// dirSeed keys the name hash: fixed for the process (cookies must not
// change while a mount lives), unknown outside it (names cannot be chosen
// to collide).
var dirSeed = maphash.MakeSeed()

const (
	cookieDot    = 1
	cookieDotDot = 2
	cookieFirst  = 3         // the smallest cookie of a name
	cookieMax    = 1<<63 - 1 // lseek takes no more than LLONG_MAX
)

// cookieOf is name's place in its directory.
func cookieOf(name string) uint64 {
	switch name {
	case ".":
		return cookieDot
	case "..":
		return cookieDotDot
	}
	return cookieFirst + maphash.String(dirSeed, name)%(cookieMax-cookieFirst)
}

// cookieStream is a listing in cookie order, each entry's Off its cookie.
type cookieStream struct {
	ents []fuse.DirEntry
	i    int
}

// newCookieStream orders ents by cookie. Two names of one hash (about one
// directory in 2^40 of a million entries) get consecutive cookies in this
// listing; a stream of them may then list one twice or not at all if the
// other is removed meanwhile.
func newCookieStream(ents []fuse.DirEntry) *cookieStream {
	keys := make([]cookieKey, len(ents))
	for i := range ents {
		keys[i] = cookieKey{cookieOf(ents[i].Name), int32(i)}
	}
	slices.SortFunc(keys, func(a, b cookieKey) int {
		if a.off != b.off {
			return cmp.Compare(a.off, b.off)
		}
		return strings.Compare(ents[a.i].Name, ents[b.i].Name)
	})
	out := make([]fuse.DirEntry, len(ents))
	for j, k := range keys {
		out[j] = ents[k.i]
		out[j].Off = k.off
		if j > 0 && out[j].Off <= out[j-1].Off {
			out[j].Off = out[j-1].Off + 1
		}
	}
	return &cookieStream{ents: out}
}

// cookieKey is an entry's cookie and its index in the listing as read.
type cookieKey struct {
	off uint64
	i   int32
}

func (s *cookieStream) HasNext() bool { return s.i < len(s.ents) }

func (s *cookieStream) Next() (fuse.DirEntry, syscall.Errno) {
	e := s.ents[s.i]
	s.i++
	return e, 0
}

func (s *cookieStream) Close() {}

// Seekdir continues after the entry whose cookie is off (0: from the
// start); any offset is a place, whether or not its entry is still there.
func (s *cookieStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	s.i = sort.Search(len(s.ents), func(i int) bool { return s.ents[i].Off > off })
	return 0
}
