// Package engine serves the tree verbs: every API face calls only
// (*Engine).Do and (*Engine).Watch. It joins three parts: the pure
// bookkeeping of package tree, a metadata store (bbolt at Home/trees.db),
// and one Files layer per tree (the interface in files.go; the real one is
// internal/store + internal/cowfs, the tests use a directory-copy double).
//
// # Vocabulary
//
// A tree has an id (given, or "t1", "t2", ...; a tree ws_mount makes is
// named after its base), an owner uid, a base directory, a backend
// ("dir": files only, today) and a budget. Its nodes have engine-generated ids
// "n1" (the root), "n2", ...; the root's files are the branch "main", every
// other node's files the branch named by its id. A node's Path in replies is
// its branch's Files.Path while it is live, empty otherwise. Files-only
// nodes hold no RAM: suspending one is bookkeeping (it keeps its files, loses
// its Path) and resuming it restores the Path.
//
// # Lifecycle of a verb
//
// Do validates every field (a bad one is api.ErrBadRequest; an unknown op
// too), takes the tree's mutex, plans the verb on the tree (a refusal changes
// nothing), performs the file effects, writes the plan to bbolt in ONE
// transaction, applies it in memory, emits its events and replies. The order
// of effects is chosen so that a SIGKILL at any point leaves a consistent
// tree after reconcile:
//
//   - fork, fork_batch, rollback: Files.Fork first, then the metadata
//     transaction (the commit point). A crash in between leaves orphan
//     branches, which reconcile aborts; a failed transaction unwinds the
//     branches at once.
//   - commit: a commit intent {child, parent} is written first; then
//     Files.Commit (the commit point: it applies the child and drops its
//     branch atomically); then the plan, clearing the intent (not synced:
//     the intent, synced before Files.Commit, finishes a plan that a power
//     loss took). On open, an
//     intent whose child branch is gone is a commit that happened and is
//     finished (the parent's generation goes up, the siblings go stale); an
//     intent whose child branch is still there is dropped.
//   - abort, prune: the metadata transaction first (the commit point), then
//     Files.Abort. A crash in between, or a failed Files.Abort (logged),
//     leaves orphan branches that reconcile aborts.
//   - protect, unprotect, suspend, resume, auto_evict: metadata only.
//
// Reconcile (at New for every open tree, and at tree_open): finish or drop a
// commit intent; drop every node whose branch Files lacks, with its subtree
// (never the root: a files layer without main is an error); abort every
// branch the tree lacks; make suspended nodes' files unwritable; re-measure
// disk usage. Every node comes back in its
// stored state: files-only nodes can always be re-established, so live nodes
// stay live.
//
// A verb that panics halfway (a bug) fails with internal, and its tree may
// then disagree with what is on disk: the tree is marked broken, refuses
// every verb with busy, and is reloaded in the background (its files
// closed, then loaded and reconciled as after a crash). The other trees and
// the daemon go on. A tree that fails to reload is left closed; tree_open
// retries it.
//
// tree_drop forgets a tree (closes its files layer, ends its watchers) but
// keeps it on disk, marked closed; tree_open loads it again (idempotent on a
// loaded tree). A dropped tree's id stays taken. tree_delete removes a tree
// for good, loaded or dropped: it closes its files layer, renames its
// directory aside, deletes its metadata in one transaction (the id is free
// from then on) and removes the directory; New removes what a crash left
// aside. The base directory is never touched.
//
// Suspended nodes: a files layer that implements Freezer has a suspended
// node's branch made unwritable (EROFS through its path) before the plan
// that suspends it is saved, and writable again after the plan that resumes
// it; Reconcile makes the suspended nodes' branches unwritable again.
//
// Latency: tree_fork_batch's latency_ns is measured from the moment the
// verb holds the tree's mutex (the source's pause) to the reply; each fork's
// latency_ns runs from the same start to the moment Files.Fork returned, when
// every child's files exist, so all forks of a batch share it.
//
// # Views and owners
//
// A workspace mount is a view of a tree (views.go): ws_mount opens the tree
// that holds its base (a dropped one is opened again) or makes one, named
// after the base, and asks the files layer (Viewer) to mount the view. The
// ws_* verbs are tree verbs on that tree: ws_create is a fork labelled with
// the branch's name, ws_commit a commit, ws_abort an abort, through the same
// code (fork, commit, remove), so budgets, events and metrics apply. A
// view's control files call back into Do through Config.Via. Names: a node
// is named by its id, by its label when exactly one node has it, and the
// root by "main"; new branch names may not be "main" or of the id form.
// Views are recorded in trees.db (views/<tree>/<mountpoint>: mountpoint,
// node shown, who mounted it) before a verb that changes them answers, and
// mounted again at the tree's load, as their makers; a view whose node went
// shows its nearest ancestor. Crash order: ws_mount mounts, then records
// (a crash in between leaves a dead mount that the next daemon detaches);
// ws_unmount unmounts, then forgets; a switch records, then shows.
//
// A tree belongs to the uid that made it (treeMeta.Owner; requests without
// credentials are the daemon's own). Every verb on a tree, Watch of it and
// a view of its base is refused (forbidden) to other uids but root and the
// daemon's; tree_list shows a uid its own trees.
//
// # Locking
//
// Engine.life serialises tree_create, tree_open, tree_drop, tree_delete and
// Close.
// Engine.mu guards the map of loaded trees and the closed flag, and is held
// only to look up, insert or remove. treeState.mu serialises every verb on
// one tree, with its Files calls and its metadata writes; verbs on different
// trees run in parallel (bbolt serialises their transactions). hub.mu guards
// the watchers. Order: life, treeState.mu, Engine.mu, hub.mu. A view's FUSE
// requests read the tree's names table (its own lock) and ask for verbs
// through Do, which waits for treeState.mu; so a forced unmount of a view,
// which waits for the view's requests, is made with treeState.mu released
// and the tree marked dropped (takeViews): a request waiting for the mutex
// then finds the tree gone. Events are
// emitted under the tree's mutex, so each tree's stream is in verb order
// with consecutive Seq numbers, and Watch takes its snapshot under the same
// mutex, so snapshot and stream meet exactly.
//
// # Sharp edges
//
// A watcher that falls WatchBuffer events behind is cut off (its channel is
// closed) rather than stalling the verbs. Disk usage is the files layer's
// (Files.DiskUsage: what each branch's layers allocate, at most a second
// old), read before every fork, at tree_nodes, tree_list and Stats (the
// metrics), after commits and at open; it is never saved, since the files
// layer recomputes it. The files layer itself enforces the disk budget on
// writes (Files.SetDiskLimit, given the budget at create and open); a fork
// needs NodeDiskReserve free for each new node. A commit whose metadata transaction
// fails after Files.Commit has still happened: the error says so and the
// intent finishes it at the next open.
package engine
