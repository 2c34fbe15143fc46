// Package cowfs is the FUSE filesystem (go-fuse v2) that shows a store's
// branches: the mount root shows the mount's current branch, /@NAME shows
// any branch and /@NAME/@CHILD its children, and a .branchfs_ctl file at
// each of those roots takes BranchFS's control writes (create:NAME,
// switch:NAME, commit, abort) and ioctls (CREATE 0x80806200 filling a
// 128-byte buffer with the new name, COMMIT 0x6201, ABORT 0x6202; a lost
// first-commit-wins race is ESTALE, a commit of a branch with children is
// EBUSY: commit is leaf-only). A root (the mount's or an /@NAME view's)
// that shows a stale branch still answers getattr, its control file and
// its @NAME views, so the branch can be aborted or switched away from; its
// files read and list (the work can be rescued), and every change answers
// ESTALE.
//
// Every operation resolves its node's path through the store, so a node
// costs nothing but its path; a first write copies the file up into the
// branch's head. Inode numbers are the real files' (a copy-up keeps the
// original's), and a node's go-fuse identity carries its view in the
// generation, so /f and /@b/f are different kernel inodes.
//
// As root, opened files are served by FUSE passthrough: the kernel does the
// data I/O on our file descriptor and the daemon sees no reads or writes.
// The kernel keeps one backing file per FUSE inode, and go-fuse keeps it
// until the inode's last release has returned from cowfs, so an open that
// finds a new real file (a copy-up) while the old one may still back the
// inode (a descriptor open, or a release in go-fuse's hands) answers
// ESTALE, and the kernel looks the path up again into a new inode
// (node.bind).
// A branch with a quota is served without passthrough, so that its writes can
// be counted. Under a store limit (a tree's disk budget) a descriptor opened
// for writing gets passthrough only while the store has room
// (store.WritePassthrough); closer to the limit it is served by the daemon
// with FOPEN_DIRECT_IO, so that it can share its kernel inode with
// passthrough descriptors, and each write is checked before it is made.
//
// Requests reach the daemon over FUSE over io_uring where the kernel offers
// it (Config.Transport, transport.go: auto, uring or dev; the transport is
// go-fuse's, in the fork under third_party/go-fuse), else by reads and
// writes of /dev/fuse; FS.Transport says which.
//
// The kernel caches names, attributes and listings (30 s by default, and
// directories open without an OPENDIR: rawdir.go); every change made through
// one view is sent as an invalidation to every other view of the branch, in
// every mount of the store (notify.go). A copy-up changes the ctime of the
// head directory it makes an entry in, which no request on that directory
// told the kernel: every view, the writer's too, forgets its attributes
// before the copying request answers (store.Event.Attr), or a cached stat
// and an fstat after a listing would disagree (GNU tar: "file changed as
// we read it").
// A listing's READDIR offsets are
// hashes of the names, served in hash order (dircookie.go): a directory
// stream continued in a listing rebuilt after removals or additions (rm -r,
// find -delete, git) lists every other entry exactly once and never fails
// for it, and telldir/seekdir work.
//
// Exactly Linux inside a branch: new objects get the mode the kernel sent
// (the caller's umask applied; the daemon's own umask undone); a name
// longer than the filesystem's NAME_MAX is ENAMETOOLONG at its lookup;
// setuid and setgid are cleared when the kernel flags a request to (see
// killpriv.go), and a writer of such a file is served without passthrough
// so that its writes are flagged.
//
// Locking: FS.mu guards the current branch of the mount; each node's handle
// counts are guarded by node.mu. The store's own lock makes each operation
// atomic against commits. FUSE handlers never spawn processes.
package cowfs
