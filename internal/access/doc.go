// Package access decides whether a requester may name a path in a request:
// the rules for a workspace mountpoint and for a base directory, checked
// against the requesting peer's credentials.
//
// # Vocabulary
//
// A Cred is who asks: a uid, a gid and supplementary groups. The JSON-lines
// face takes them from the socket (SO_PEERCRED, SO_PEERGROUPS); the HTTP
// face, whose only credential is the bearer token, asks as the daemon itself
// (Self). WithCred puts a Cred in a request's context and FromContext reads
// it back where a path is checked.
//
// Rules.Mountpoint and Rules.Base resolve a path (symlinks and ".." as the
// kernel resolves them for the requester), open the directory, and check it.
// A Dir is the result: an O_PATH descriptor of the checked directory and its
// canonical path. A refusal is a *Refusal naming the rule it broke; it wraps
// api.ErrForbidden. A path that is not absolute or not a directory is
// api.ErrBadRequest.
//
// # The rules
//
// A mountpoint (ws_mount):
//   - absolute: an absolute path without NUL; a missing one is created as the
//     requester (so it is theirs), if they may create it.
//   - reach: the requester can reach it (search permission on every
//     component, checked by the kernel as them).
//   - system: not a system directory nor a parent of one: /etc, /usr, /bin,
//     /sbin, /lib*, /boot, /dev, /proc, /sys (nor anything below those), /run,
//     /var/lib (and so /, /var), the daemon's home (nor below it). By
//     canonical name and by identity: a bind mount of /etc elsewhere is /etc,
//     and a directory below one is found by walking up its "..".
//   - pseudo-fs: not on a pseudo filesystem (proc, sysfs, cgroup, ...: the
//     filesystem type from statfs, not the name).
//   - owner: owned by the requester (root may use any directory).
//   - empty: an empty directory.
//
// A base (ws_mount, tree_create):
//   - absolute, reach, as above (a missing base is not created).
//   - pseudo-fs: not /proc, /sys, /dev nor below them, and not on a pseudo
//     filesystem by type.
//   - home: neither inside the daemon's home nor containing it.
//   - read-write: the requester could read, write and search it themselves.
//
// # How the requester's view is checked
//
// The open, the creation of a missing mountpoint and the permission checks
// run on a fresh OS thread whose filesystem credentials are the requester's
// (setfsuid, setfsgid and setgroups are per thread on Linux; the daemon's
// other threads keep theirs). The kernel then applies its own rules, as it
// would to the requester: mode bits, ACLs, search permission along the path,
// the capabilities it drops when the fsuid leaves 0, root squashing on NFS.
// Reimplementing mode-bit logic from /proc or os/user would miss ACLs and
// those. The thread is never returned to the Go scheduler (the goroutine
// exits locked), so no other goroutine ever runs with a requester's
// credentials. A daemon not running as root cannot take another uid's
// credentials and checks only requests of its own uid (others are refused).
//
// # Sharp edges
//
// The checks look at the directory through the descriptor they opened, so a
// symlink or rename race while checking cannot make them check one directory
// and return another; Dir.Path is the canonical path at that moment. The
// mount itself uses the descriptor where the mounter supports it (cowfs as
// root mounts on /proc/self/fd/N). A base is used by path afterwards (the
// store opens base files by path): a requester who can rename the base or
// one of its ancestors after the check could make the daemon see another
// directory there. Keep shared daemons' bases in directories that their
// users cannot rename.
package access
