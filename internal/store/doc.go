// Package store keeps a base directory's branches: chains of copy-on-write
// layers over the base, their metadata in bbolt, and the path-level
// operations (resolve, copy-up, create, remove, rename) that the FUSE layer
// calls.
//
// Vocabulary. The base is the user's directory; it is the branch "main" and
// main writes it in place. Every other branch has a chain of layers over the
// base: chain[0] sits on the base (depth 1), chain[len-1] is the branch's
// head, the only layer it writes. A layer is a directory under
// <dir>/layers/<id> holding the files the branch changed at their relative
// paths; a delete is a whiteout, a character device 0:0 under the deleted
// name (overlayfs's form: a name of NAME_MAX bytes can be deleted; layers
// of earlier versions hold empty ".wh.NAME" files, still read), an opaque
// directory (one that hides everything below it) holds ".wh..wh..opq".
// Layers are indexed and walked by descriptors, so a path in a layer may be
// longer than PATH_MAX.
// A layer's directory is made only at its first write, so an empty head costs
// nothing on disk.
//
// Metacopy. A change of metadata alone (CopyUpMeta: chmod, chown, times,
// xattrs) of a regular file with one name from a lower layer copies no
// data: the head gets an empty file with the metadata, marked by the xattr
// user.arbor.metacopy, and the path's data is what the layers below show
// at the same path (Res.Data). The first write of data (or a rename, a link)
// copies it up whole (materialize). Diff reports such a change as
// metadata only, and a commit into main applies it to the base's file in
// place (op "meta": its owner, mode, times and xattrs; its data untouched).
//
// Inode numbers. A copy-up (of a file, or of a directory for a write
// inside it) records the number the path reported before in the xattr
// user.arbor.ino of the copy and in its index entry (Res.Ino, DirEntry.Ino):
// st_ino and readdir's d_ino stay the lower one's in every view, across
// forks, commits and a reopen (find, tar, du and git compare them).
//
// Fork is O(1) in the size of the base: the parent's head is frozen (it stays
// in the parent's chain and becomes the bottom of the child's) and both sides
// get fresh empty heads. An empty head is not frozen at all: the child simply
// shares the parent's frozen part. A fork of main makes a snapshot layer on
// the base: main keeps writing the base in place, and before it changes a
// path that a live snapshot still shows, the old state is preserved into that
// snapshot first (origin copy-on-write): a file is moved there, so a fork's
// open descriptors keep their inode, and main gets a fresh copy.
//
// Lookup cost does not grow with depth: an index maps every relative path
// present in any layer to the few layers that hold it, and a branch tests
// membership of its chain by depth in O(1). Resolution walks the path's
// components; at each one it takes the deepest-in-chain entry at or above the
// current cut (the depth below which an opaque directory or a whiteout hides
// everything).
//
// Commit. First commit wins: a commit succeeds only if the parent has not
// changed since the child's fork (its head is the one the fork left, still
// empty, and no commit landed in it; for main: the snapshot is still empty).
// A commit into a branch is O(1): the parent adopts the child's chain. A
// commit into main applies the child's changes to the base directory under a
// journal in bbolt (written, and fsynced when durable, before the first
// change; replayed at Open), in time proportional to the change. After a
// commit every other branch under the parent is stale: its changes fail
// with ESTALE, but it keeps its layers until it is aborted, so that its work
// can be read, listed, diffed and replayed onto the new state (Replay,
// rebase.go). A commit into main first keeps what it will change in the
// snapshots the stale branches read (preserveFor: a hard link for a file it
// replaces or deletes, a metadata-only copy for a change of metadata), so
// their view stays their own. Commit is leaf-only (as in BranchFS and in
// the engine's trees): a branch with children, live or stale, is refused
// with api.ErrState and EBUSY naming them, so no descendant's changes are
// ever dropped or orphaned by its parent's commit.
//
// A copy-up is not a change: the directory it makes an entry in keeps its
// atime and mtime (as in overlayfs); its ctime moves, and the mounts are
// told (Event.Attr).
//
// Abort drops the branch and its subtree from the metadata at once; layers no
// branch references are removed in the background and at Open.
//
// Locking. Store.mu guards the branch table, the layer index and every layer
// directory: path operations that only read take it shared, every mutation
// takes it exclusively. No long copy and no fsync happens under it: a
// copy-up of a file that holds data copies to a temporary name first and
// is published under the lock with a rename, if its source is unchanged
// (for main's first write to a file a snapshot shows, that copy is main's
// new file and the base's inode moves into the snapshot); a
// commit into main is decided under the lock (planned, journaled, siblings
// made stale) and applied to the base without it, then recorded under it.
// So a branch reader sees a commit into a branch all or not at all; main's
// view changes path by path while a commit into it applies (every other
// branch is stale by then, so read-only, and the child answers ESTALE). A commit into
// main whose apply fails stays decided: committing the child again finishes
// it (see Commit).
//
// Paths. Every path under the base or a layer is walked from a descriptor
// with no symlink followed (beneath.go): the daemon runs as root over bases
// that other users own and change. Open takes an flock on the base's
// descriptor: one store per base on the host; a second Open fails with
// api.ErrBusy naming the holder.
//
// Disk. The store counts what its layers allocate on disk (st_blocks, as du
// does) and can be given a limit (a tree's disk budget): see disk.go for
// how the figures stay current under FUSE passthrough and where the limit
// is enforced. Why this design: a limit the kernel enforces (a project quota
// per store on XFS or ext4 with prjquota, or a filesystem of the budget's
// size under the layers) would also stop passthrough writers exactly, but
// needs a filesystem feature the host may not have (the build machine's ext4
// is mounted without quotas, and its kernel has no XFS quota), a privileged
// daemon, and, for a loop filesystem, gives up renames between
// the layers and the base (a commit into main would copy). Counting blocks
// in the daemon works on any filesystem and costs the hot path nothing: a
// passthrough writer is never slowed, and the daemon serves writers itself
// only near the limit, where being exact matters.
//
// Sharp edges. The walk beneath the base stops symlinks, not hard links: on
// a host with fs.protected_hardlinks=0 a base's owner can link a file of
// root's into the base, and the store then serves and writes that inode.
// Names beginning ".wh." cannot be created (EINVAL), nor, through a mount,
// a character device 0:0 (EPERM: it is a whiteout's form). Renaming a
// directory that came from a lower layer copies its subtree up (overlayfs
// would need redirect_dir). Writes made to the base directory behind Arbor's
// back while it is mounted are not isolated. A hard link in a lower layer is
// split when one of its names is copied up. Under a limit, writers are served by
// the daemon (no passthrough), which costs them the FUSE write path. A file with several names in a layer (or preserved into several
// snapshots as links) is counted once for each name.
package store
