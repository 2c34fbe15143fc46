// Package fsbench is the filesystem benchmark harness: it runs the same cases
// against several filesystems, one after another in one run on the same
// disk, and reports the medians side by side with each system's ratio to
// native.
//
// # Vocabulary
//
//   - System: one filesystem under test. Setup builds it over a base
//     directory and returns the directory the cases run in (its root);
//     Teardown undoes everything Setup did. Built in: Native (the base
//     directory itself), Overlay (kernel overlayfs, root only) and
//     FuseOverlay (the fuse-overlayfs program). Arbor's filesystem plugs in
//     as one more System.
//   - Brancher: an optional interface of a System that can create branches
//     of its root. Such systems are also timed on branch create, commit and
//     abort. Overlay and FuseOverlay implement it by mounting a fresh overlay
//     over the base, which is the kernel's (and fuse-overlayfs's) equivalent
//     of a branch create; they cannot commit.
//   - base: the files every case needs, made once per run by the harness in
//     the scratch directory: two big files (one is modified in each system
//     before its cases run, so overlays copy it up), a directory of small
//     files, a git checkout with uncommitted changes, and a copy of a Go
//     module. Branch-create cases get their own bases of 100, Files and
//     10×Files files.
//   - case: one measured operation (seqread-cold, stat-warm, git-status,
//     ...). A round of a case is timed with a stopwatch that the case starts
//     and stops around the measured part, so untimed preparation and cleanup
//     stay out of the figure. Each case reports the median of its rounds in
//     its own unit: MiB/s and kIOPS are higher-is-better, times are
//     lower-is-better, and the ratio to native is taken in that unit (so a
//     throughput ratio of 0.95 and a time ratio of 1.05 both mean "5% worse").
//
// # Lifecycle
//
// Run makes a fresh directory under Config.Scratch and builds the bases
// there. Then, case by case, it runs each system: Setup on the base the case
// needs, the copy-up of the modified file if the case reads it, the case's
// rounds (cold cases sync and drop the page, dentry and inode caches before
// each round, which needs root; write-heavy cases sync first), Teardown.
// Every case thus starts on a freshly set-up system (an empty upper layer),
// and the order of the systems rotates from case to case, so the systems
// measure one case within a short window of each other and drifting load
// on a shared machine does not favour whichever runs first. After each
// Teardown the harness looks for mounts left under the scratch directory,
// detaches them and fails the run. At the end the scratch directory is
// removed. Bench (for go test -bench) instead sets each system up once for
// all its cases.
//
// Cases leave a system's root as they found it: what they write goes under
// root/.fsbench and is removed after the round. That is why Native can run
// in the base directory itself.
//
// # Sharp edges
//
//   - The numbers are only as quiet as the machine: run nothing else, and
//     read differences under about 30% on a shared VM as noise.
//   - go-build uses the caller's GOCACHE (Config.GoCache) for the standard
//     library and dependencies, and forces the module's own packages to
//     compile in every round by giving them a fresh no-op compiler flag
//     (-D=fsbench<n>), so it measures a real compile of the module over the
//     system's files with warm dependencies. That adds a few cache entries
//     per round, which go's cache trimming removes later.
//   - Overlay changes made to the base while an overlay is mounted are
//     undefined in overlayfs; the harness therefore runs the systems one at
//     a time and never touches the base while a system is set up, except
//     through that system's root.
package fsbench
