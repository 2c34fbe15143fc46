// Package nodefs is a node's files as the files API reaches them from the
// host: read, atomic write, list, stat, remove and mkdir of paths that are
// resolved inside the node's directories, never outside.
//
// # Vocabulary
//
// An FS has one or more roots, each a host directory shown at a prefix of
// the node's path space: a dir node has one, its files, at "/"; a jail
// node has its files at /workspace and its /tmp at /tmp. A path names a
// file in that space; the leading "/" is optional ("a" is "/a"). A path
// under a root's prefix is in that root; any other is in the first root
// (so "/a" and "/workspace/a" are the same file of a jail node, and a file
// named tmp at the top of its files is reached as /workspace/tmp).
//
// # No path out
//
// Every path is opened with openat2 from a descriptor of its root, with
// RESOLVE_IN_ROOT: ".." at the root stays at the root, and a symlink
// (absolute or relative, met anywhere on the path) is resolved as if the
// root were "/", as the node's own processes see it. RESOLVE_NO_MAGICLINKS
// refuses /proc-style links and RESOLVE_NO_XDEV any mount below the root.
// A write goes to a fresh temporary name in the target's parent directory
// (opened the same way) and is renamed over the target, so a symlink at
// the target is replaced, never followed out; remove and mkdir act on the
// last name through the parent's descriptor (no symlink followed).
//
// # Ownership
//
// A daemon running as root makes new files and directories owned by the
// requester (access.FromContext: the socket peer), so that a tree owner's
// own processes can change them; the HTTP face asks as the daemon.
//
// Errors wrap api sentinels: ErrNotFound (ENOENT), ErrExists (EEXIST,
// ENOTEMPTY), ErrBadRequest (a directory where a file is wanted and the
// reverse, a symlink loop, a bad path), ErrForbidden (EACCES, EPERM),
// ErrState (EROFS: a suspended node), ErrNoSpace (ENOSPC, EDQUOT).
//
// # Lifecycle and locking
//
// An FS is a value over its roots' paths: it holds no descriptor and no
// lock, and is safe for concurrent use. Each call opens its root, walks to
// its path and closes what it opened before it returns, except Open, whose
// reader the caller closes. Concurrent writes of one path each land whole
// (the last rename wins); a write never shows a reader half a file.
//
// # Sharp edges
//
// A write's temporary name (.arbor-write-PID-N, store.TempPrefix) is
// visible in the directory while the data comes (the files layer has no
// O_TMPFILE), and a fork made meanwhile carries it. A daemon killed
// meanwhile leaves it until the next start: the Journal in the write's
// context (the engine's, per tree) names it and Reap removes it when the
// tree loads; the store drops such names from its layers at Open.
package nodefs
