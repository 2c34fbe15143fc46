// Package posixtest is Arbor's POSIX conformance suite: one set of checks,
// each with the errno values the Linux kernel gives, run against any
// directory tree that claims to be a real filesystem. It runs against a
// plain temporary directory (the baseline: ext4 and tmpfs must pass it) and
// against cowfs branch mounts at several depths.
//
// # Vocabulary
//
//   - Env: the filesystem under test. Dir makes a fresh empty directory in
//     it; Lower makes one in a layer below the one under test, runs a setup
//     function there, and returns the same directory as seen from above (for
//     cowfs: written, then forked; the child's view is returned). The files
//     setup made are lower files: the first write to one is a copy-up.
//     TempDirEnv is the Env of a plain directory, with no layers.
//   - Case: one named check. A case with Lower gets a directory populated in
//     the lower layer; one without gets an empty directory. A case with
//     Nobody also runs checks as uid 65534 in a child process.
//   - StrictEnv: an Env that turns "unsupported" skips into failures.
//
// # Use
//
//	func TestMain(m *testing.M) { posixtest.Main(m) }   // required: see Main
//	func TestPosix(t *testing.T) { posixtest.Run(t, myEnv{}) }
//
// Each case is a subtest named like "rename_lower_dir"; -run selects them.
//
// # What is covered
//
// Every case checks results and errno values with errors.Is(err, unix.EXXX).
// The "_lower" cases do the same on files that came from the lower layer.
//
//   - Regular files: create (mode, owner, O_CREAT on an existing file),
//     O_EXCL (EEXIST, also on a directory and a dangling symlink, not
//     following it), O_TRUNC, O_APPEND with several fds and with concurrent
//     writers (no record lost or torn), pwrite on O_APPEND appends, read,
//     write, pread, pwrite (offset untouched, holes read as zeros), EBADF on
//     the wrong access mode; a reader opened before a copy-up sees writes
//     made after it (file_lower_reader_sees_copyup).
//   - Directories: mkdir EEXIST (over a dir, file, dangling symlink), rmdir
//     ENOTEMPTY / ENOTDIR / ENOENT / EINVAL for ".", unlink of a dir EISDIR,
//     readdir contents with d_type and d_ino from raw getdents64 (small
//     buffer, 300 entries), lookup of a missing name ENOENT (also after a
//     negative lookup), a path through a file ENOTDIR (and a trailing slash,
//     O_DIRECTORY), opening a dir for writing EISDIR, st_nlink of
//     directories (2 + subdirectories; skipped as unsupported where the
//     filesystem reports 1, as btrfs does); merged listings of a lower dir
//     with deletes (whiteouts) and re-creates; rmdir of a lower dir whose
//     children are only in the lower layer (ENOTEMPTY), and after deleting
//     them (a new dir of that name is empty).
//   - Directory streams changed while read (dir_stream_*): a depth-first
//     remove as rm -r does it (the parent's stream open, read 2 KiB at a
//     time, while children are read and removed), of a tree of ~200-byte
//     names bigger than one READDIR reply, made here or in the lower layer,
//     with entries removed ahead of the stream too; a second stream opened
//     while the first is half read and past the number left; entries added
//     and lower entries copied up during the stream; telldir/seekdir. Every
//     entry not removed or added meanwhile shows exactly once, none twice,
//     and getdents never fails.
//   - Symlinks: readlink (relative, absolute), lstat against stat (type,
//     size, inode), readlink of a file EINVAL, dangling links (ENOENT, and
//     O_CREAT creating the target), ELOOP (two-link loop, self loop, 41
//     links, O_NOFOLLOW), writing through a lower symlink.
//   - Hard links: link count, one inode, shared data and metadata, EEXIST,
//     EPERM for a directory, link of a symlink; across copy-up: a file with
//     three names in the lower layer, written through one, seen by the
//     others with the same st_ino and nlink; a new link to a lower file.
//   - Rename: to a new name (inode kept), over a file (an open fd on the
//     replaced file still reads it, nlink 0), onto itself and between two
//     links of one inode (no-op), dir over an empty dir, dir over a
//     non-empty one (ENOTEMPTY or EEXIST), file over dir EISDIR, dir over
//     file ENOTDIR, into its own subdir EINVAL, ".." following a moved dir,
//     RENAME_NOREPLACE (EEXIST), RENAME_EXCHANGE of a file and a dir (inodes
//     swap; EINVAL with NOREPLACE), and of lower ones; a lower file over a
//     lower file; a lower directory with children renamed, renamed again
//     and back (nothing shows through at the old name); a lower dir over
//     lower dirs that are full, emptied in this layer, or empty.
//   - Unlink of open files: the fd reads, writes, truncates, fsyncs, fstat
//     says nlink 0; the same for lower files open for reading or writing.
//   - truncate/ftruncate: shrink, grow (reads zeros, cut bytes never come
//     back), EINVAL, EISDIR, on lower files.
//   - fallocate: mode 0 (size, blocks, zeros, data kept), KEEP_SIZE,
//     PUNCH_HOLE|KEEP_SIZE (zeros, size kept), PUNCH_HOLE alone EOPNOTSUPP;
//     on a lower file.
//   - Sparse files: holes read as zeros, few blocks used, SEEK_DATA /
//     SEEK_HOLE (ENXIO at the end; skipped if the filesystem says EINVAL).
//   - Large files: data at 5 GiB and just past 4 GiB, stat size, SEEK_END,
//     ftruncate above 4 GiB; a sparse 5 GiB lower file copied up must stay
//     sparse and keep its data (large_file_lower).
//   - chmod (setuid, setgid, sticky bits, fchmod, through a symlink),
//     chown/fchown/lchown (root only; non-root gets EPERM for another uid),
//     chown clearing setuid/setgid, ownership kept across copy-up,
//     utimensat (ns precision, UTIME_NOW, UTIME_OMIT, NULL, on a dir,
//     futimes, EINVAL for tv_nsec 1e9, AT_SYMLINK_NOFOLLOW on a symlink),
//     mtime kept across a metadata copy-up, mtime/ctime updated by write,
//     ftruncate and chmod (ctime only), a directory's by create, rename,
//     unlink and mkdir.
//   - xattrs (user.*): set, get, list, remove, empty and binary values, size
//     queries, ERANGE, ENODATA, XATTR_CREATE (EEXIST), XATTR_REPLACE
//     (ENODATA), through an fd, on a dir, EPERM on a symlink, EOPNOTSUPP for
//     an unknown namespace; lower attributes seen, kept across copy-up,
//     removable. Skipped as unsupported if user.* xattrs are refused.
//   - mkfifo/mknod: a working FIFO, mknod S_IFIFO and S_IFREG, char and
//     block devices with st_rdev (root; EPERM otherwise), a lower FIFO.
//   - mmap: MAP_SHARED writable (write via the mapping, msync, read via
//     read(2), another fd, a new open after munmap; write(2) seen in the
//     mapping), MAP_PRIVATE (the file is unchanged), EACCES for a shared
//     writable mapping of an O_RDONLY fd; a lower file mapped shared
//     writable, then read through a new fd; a lower file mapped while
//     other readers are open.
//   - Permission checks as the kernel makes them, as uid 65534 in a child
//     process against root's files: EACCES reading a 0600 file, writing a
//     0644 one, creating/mkdir/symlink/mkfifo/unlink/rename/link in a 0755
//     dir, group bits before other bits, owner bits before group bits; EPERM
//     for chmod/chown/explicit utimensat of another's file, EACCES for
//     utimensat-now of an unwritable one; sticky-bit dir: EPERM to unlink,
//     rename or replace another's file, own files allowed; search: EACCES
//     inside a 0700 dir, a 0711 dir searchable but not listable, a 0744 dir
//     listable but not searchable; owner and mode kept across copy-up. Each
//     starts with positive controls, so a filesystem refusing uid 65534
//     everything fails rather than passes.
//   - umask: with umask 0, 002, 022 and 077 (set on a thread of the test's
//     own, CLONE_FS unshared), mkdir, a sticky mkdir, O_CREAT (and the new
//     descriptor's fstat), mkfifo and mknod give the asked mode without
//     exactly the umask's bits; in a setgid directory a new directory
//     inherits setgid and the group, a new file the group (umask_*).
//   - Long names and paths: a name of 255 bytes for every call that takes
//     one (create, mkdir, mkfifo, mknod, symlink, link, rename from and to,
//     truncate, chmod, chown, utimensat, lstat, unlink, rmdir), 256 bytes
//     ENAMETOOLONG for each; lower names of 255 bytes read, copied up,
//     renamed, deleted and made again; paths of PATH_MAX - 1 bytes for the
//     same calls and PATH_MAX ENAMETOOLONG, also a lower one; work relative
//     to a directory descriptor more than 8 KiB down (names_*, path_*).
//   - setuid/setgid: cleared by a write, ftruncate, truncate or O_TRUNC of
//     uid 65534 (setgid of a file not group-executable only outside its
//     group), never by an open alone (also opened for writing and closed),
//     kept for root (CAP_FSETID); a setuid file created by uid 65534 keeps
//     the bit until its first write; on lower files too; chown by root
//     clears setuid and a group-executable setgid (setid_*).
//   - statfs/fstatfs (sane counts, 255-byte names, ENAMETOOLONG), fsync,
//     fdatasync (also on O_RDONLY fds and a directory), sync_file_range,
//     syncfs.
//   - Inode numbers: stable while open (through write, chmod, rename, link,
//     unlink), unique across lower and upper files on one st_dev, stable
//     across copy-up (data and metadata) and for a lower dir that gains a
//     child.
//
// # Skips
//
// A case skips, saying why, only where a filesystem may legitimately
// differ: it answers ENOTSUP/EOPNOTSUPP/ENOSYS (or the call's own EINVAL
// for an unknown flag) for user xattrs, fallocate modes, renameat2 flags,
// SEEK_HOLE or AT_SYMLINK_NOFOLLOW, or reports directory st_nlink 1. On a
// StrictEnv those fail. Cases needing root (the uid 65534 checks, chown,
// the chown case of lower files) skip when not root, and fail then if
// ARBOR_TEST_REQUIRE is set. Cases that are root-only in part (mknod of
// devices, chown) check the EPERM a non-root caller gets instead.
//
// # The uid 65534 child
//
// A Nobody step runs in a child: the test binary itself, re-executed with
// -test.run=^$ and two environment variables. Main, called from the
// package's TestMain, sees them, drops to uid, gid and groups 65534 (the
// binary stays root-owned and in a 0700 build directory, so it cannot be
// exec'd as 65534 directly), checks that no capability is left, runs the
// step and prints a marker line. Without the TestMain hook no marker
// appears and the case fails saying so. Each child is bounded by a
// timeout. For a FUSE mount, the child reaching the mount at all needs
// allow_other, and every component of the path Env.Dir returns must be
// searchable by others.
//
// # Sharp edges
//
//   - Cases run one after another; a case's fds and mappings are closed
//     before it returns, even on failure (no fd is closed twice, which in a
//     process serving FUSE could close the server's).
//   - The 5 GiB files are sparse; a filesystem that cannot keep holes (or a
//     copy-up that fills them) needs 10 GiB and is slow, and fails anyway.
//   - Timestamps are compared exactly (nanoseconds) where they were set,
//     and within a few seconds of now where the kernel set them.
package posixtest
