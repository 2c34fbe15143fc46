// Package image is a root filesystem image: a directory tree built from
// Debian packages (mmdebstrap), cached by the hash of what it was built
// from, named, listed and removed. A jail tree that names an image runs
// its sandboxes on the image's root instead of the host's.
//
// # Vocabulary
//
// A Store holds the images under one directory ($ARBOR_HOME/images). A
// Spec is what an image is built from: a suite (bookworm), an mmdebstrap
// variant (minbase), extra packages, a mirror, and optionally a caller's
// Hook (with its HookID) that changes the built root before it is
// published. An image's ID is the hash of those inputs and the builder's
// version (builderVersion); its Name is what users call it. Several
// names may share one ID.
//
// # Layout
//
//	<dir>/<id>/rootfs/        the root filesystem
//	<dir>/<id>/image.json     its inputs, build time and size
//	<dir>/names/<name>        the id the name stands for
//	<dir>/.build-<id>-*/      a build in progress (or one cut short)
//	<dir>/.lock, .lock-<id>   flock(2) locks: the names; one id's build
//
// # Lifecycle
//
// Build takes the id's lock (a concurrent build of the same inputs waits
// for it, then finds the image cached), builds into a temporary
// directory beside the images, runs the Hook there, writes image.json,
// renames the directory to <dir>/<id> (the publication: atomic) and only
// then points the name at it. A failed, cancelled or killed build
// leaves no <dir>/<id>: its temporary directory is removed at once, or
// by the next build of that id, or by New. A name moved to other inputs
// or removed drops its old ID's files when no other name holds them.
//
// mmdebstrap runs as root (mode root) inside `unshare --mount --pid
// --fork --kill-child`: the mounts it makes in the new root (/proc,
// /dev, /sys) live in a mount namespace of its own, so none reaches the
// host, and when the build is cancelled or the daemon dies every process
// of the build dies with the namespace's init. Removing a cut-short
// build's directory then never descends into a host mount.
//
// # Why the daemon builds
//
// Images are built by arbord (the image_build verb, its progress
// streamed to the client like tree_exec's output), not by the CLI: the
// daemon owns $ARBOR_HOME (mode 0700) and resolves an image's name when a
// tree names it, it runs as root (mmdebstrap's root mode, no subuid
// setup), and one process holding the store sees every build of a name,
// so that a rebuild of an image in use by a tree can be refused.
//
// # Locking
//
// Store.mu orders the names within a process; <dir>/.lock orders them
// across processes (two stores on one directory). A build holds
// .lock-<id> for its whole length and the names lock only to repoint a
// name. No lock is held across a build by the names.
//
// # Sharp edges
//
//   - The mirror defaults to the first Debian mirror apt is configured
//     with here (/etc/apt/sources.list, sources.list.d/*), so that a
//     build works where apt does. It is an input: another mirror makes
//     another image.
//   - The image's files are the host's files under <dir>: a jail binds
//     them read-only, but root on the host can change them behind the
//     store's back.
//   - A Hook's function is not hashed: its HookID is. Change the HookID
//     whenever what the hook writes changes.
package image
