// Package engine serves the tree verbs: every API face calls only
// (*Engine).Do, (*Engine).Watch and (*Engine).Exec. It joins four parts:
// the pure bookkeeping of package tree, a metadata store (bbolt at
// Home/trees.db), one Files layer per tree (the interface in files.go; the
// real one is internal/store + internal/cowfs, the tests use a
// directory-copy double) and one Backend per tree (backend.go: what each
// node runs; dir runs nothing, jail a process sandbox, vm a microVM).
//
// # Vocabulary
//
// A tree has an id (given, or "t1", "t2", ...; a tree ws_mount makes is
// named after its base), an owner uid, a base directory, a backend
// (named at tree_create from Config.Backends, "dir" by default; stored with
// the tree and shown in its summary) and a budget. Its nodes have engine-generated ids
// "n1" (the root), "n2", ...; the root's files are the branch "main", every
// other node's files the branch named by its id. A node's Path in replies is
// its branch's Files.Path while it is live, empty otherwise. A node's RAM is
// what its backend reports (Backend.RAM, read whenever the engine measures:
// before a fork, a resume and an auto-evict, and in every reply that shows
// usage); a new child is expected to hold Caps.StartRAM (or its source's
// RAM, for a backend whose fork carries memory) until it is measured, and
// that is the cost its fork is planned with. Files-only (dir) nodes hold no
// RAM: suspending one is bookkeeping (it keeps its files, loses its Path)
// and resuming it restores the Path.
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
//   - create: the root's sandbox is started (Backend.Start, after stopping
//     whatever the backend held for that id), then the metadata. A crash
//     in between leaves a sandbox of no tree; the next create of the id
//     stops it.
//   - fork, fork_batch, rollback: the nodes the fork evicts are suspended
//     (as for suspend, below), so that what they free is free for the
//     children; then Backend.Fork, inside which the source is paused,
//     Files.Fork runs, the children's sandboxes start and the source
//     resumes; then the metadata transaction (the commit point). A
//     crash in between leaves orphan branches and sandboxes, which
//     reconcile aborts and stops; a failed step or transaction unwinds
//     them at once (children stopped, branches aborted). A backend that
//     measures its forks (ForkTimer: jail) gives the reply its pause_ns
//     and each fork's start_ns.
//   - commit: the child's execs end and its sandbox is suspended (so that
//     nothing writes its files while they are applied; resumed again if
//     the commit fails); a commit intent {child, parent} is written; then
//     Files.Commit (the commit point: it applies the child and drops its
//     branch atomically); then Backend.Commit carries the rest of the
//     child's state (a jail's /tmp, a VM's memory) into the parent; then
//     the plan, clearing the intent (not synced: the intent, synced before
//     Files.Commit, finishes a plan that a power loss took); then the child's sandbox and those of
//     the nodes gone stale are stopped (a failure is logged: reconcile
//     stops them). On open, an intent whose child branch is gone is a
//     commit that happened and is finished (Backend.Commit again, which is
//     idempotent; the parent's generation goes up, the siblings go stale);
//     an intent whose child branch is still there is dropped. A failed
//     Backend.Commit fails the verb but leaves the intent, so the next
//     open finishes it. A crash after the suspend
//     and before Files.Commit leaves a live child whose sandbox is
//     suspended: reconcile resumes it.
//   - rebase (tree_rebase): a fork of the node's parent (as above), then
//     Rebaser.Replay of the node's changes onto the new child; a failed
//     replay aborts the new child. A stale node's files stay readable and
//     diffable until it is aborted, so that its work can be rescued so.
//   - abort, prune: the subtree's execs end and its sandboxes are stopped,
//     leaves first (a failure fails the verb, since what the nodes run must
//     end; the nodes stopped so far stay live without a sandbox until the
//     verb is retried or the tree reopened); then the metadata transaction
//     (the commit point); then Files.Abort. A crash among the stops leaves
//     live nodes whose sandbox is gone (reconcile: Caps.Lost); one after
//     the metadata, or a failed Files.Abort (logged), orphan branches that
//     reconcile aborts.
//   - suspend, and every node a fork, rollback, resume or auto_evict
//     evicts: the node's execs end, its sandbox is suspended
//     (Backend.Suspend), its files made unwritable (Freezer), then the
//     metadata (the commit point). resume: its files made writable, its
//     sandbox resumed (Backend.Resume), then the metadata. A failed step or
//     transaction undoes the steps before it. A crash before the metadata
//     leaves a node whose sandbox is in the other state: reconcile puts
//     the sandbox back in the tree's.
//   - protect, unprotect: metadata only.
//
// TestSandboxCrash SIGKILLs the engine at each backend step above (a test
// double of Backend kills its own process right after the step took
// effect) and checks the reopened tree and its backend agree; TestCrash
// kills it at random points of random verbs.
//
// Reconcile (at New for every open tree, and at tree_open): finish or drop a
// commit intent; drop every node whose branch Files lacks, with its subtree
// (never the root: a files layer without main is an error); abort every
// branch the tree lacks; make the backend agree with the tree (below); make
// suspended nodes' files unwritable; re-measure disk usage and RAM.
//
// The backend is made to agree with the tree from Backend.Nodes: a sandbox
// of a node the tree lacks or holds stale is stopped; a running sandbox of
// a suspended node is suspended; a suspended sandbox of a live node is
// resumed; a live node whose sandbox is gone (the daemon was killed or
// closed: Backend.Close stops everything) follows the backend's rule,
// Caps.Lost: LostRestart starts a fresh sandbox over its files (dir and
// jail: nothing a process ran survives anyway, and the node stays live),
// LostSuspend marks it suspended, durably (vm: its state is on disk, and
// tree_resume brings it back). A step that fails fails the tree's load.
//
// # Exec and leases
//
// Exec (tree_exec) checks the node is live and records the activity under
// the tree's mutex, takes a lease on the node and runs Backend.Exec outside
// the mutex, so the tree's other verbs go on meanwhile. A lease's context
// derives from the engine's own lifetime (ended by Close), never from a
// request's (the request's end cancels it through context.AfterFunc): no
// request's context becomes a resource's lifetime, and backends are opened
// with the engine's context too. Abort, prune, commit, suspend, eviction,
// a drop or delete of the tree and Close end the leases of the nodes they
// take away, under the tree's mutex and before the backend call that kills
// what the node runs; the exec then fails with api.ErrState saying why
// ("exec on node n3 of tree t1 ended: the node was aborted (it or an
// ancestor)"), or api.ErrBusy when the engine closed. Close waits for the
// execs to return before it closes the backends.
//
// The files verbs (file_read, file_write, ..., nodefiles.go) and the
// background process verbs (exec_list, exec_kill, exec_logs, tree_exec with
// detach) take the same lease (useNode): a read streamed from OpenFile
// holds it until its reader is closed, and a verb that takes the node away
// makes its next Read fail naming that verb; a write cut short leaves the
// file as it was. They serve a live node, and reads a suspended one too
// (its files are read-only). A node's files are the backend's
// (FileServer.NodeFiles: a jail's /workspace and /tmp) or, for a backend
// without it, its files directory at "/", resolved by internal/nodefs.
//
// A verb that panics halfway (a bug) fails with internal, and its tree may
// then disagree with what is on disk: the tree is marked broken, refuses
// every verb with busy, and is reloaded in the background (its files
// closed, then loaded and reconciled as after a crash). The other trees and
// the daemon go on. A tree that fails to reload is left closed; tree_open
// retries it.
//
// tree_drop forgets a tree (ends its execs, closes its backend, which stops
// what its nodes run, and its files layer, ends its watchers) but keeps it
// on disk, marked closed; tree_open loads it again (idempotent on a loaded
// tree; its live nodes come back by the backend's Lost rule). A dropped
// tree's id stays taken. tree_delete removes a tree for good, loaded or
// dropped: it closes its backend and files layer, renames its
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
// verb holds the tree's mutex to the reply; each fork's latency_ns runs
// from the same start to the moment Backend.Fork returned, when every
// child's files exist and its sandbox runs, so all forks of a batch share
// it.
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
// daemon's; tree_list shows a uid its own trees. Only root and the
// daemon's uid may own a tree whose backend runs processes (any but dir:
// mayOwnSandboxes, checked at tree_create and at each backend open), since
// a sandbox's processes are root inside it.
//
// # Locking
//
// Engine.life serialises tree_create, tree_open, tree_drop, tree_delete and
// Close.
// Engine.mu guards the map of loaded trees and the closed flag, and is held
// only to look up, insert or remove (and to count an exec in, so that Close
// never waits while one is added). treeState.mu serialises every verb on
// one tree, with its Files and Backend calls (Exec excepted) and its
// metadata writes; verbs on different trees run in parallel (bbolt
// serialises their transactions). treeState.leaseMu guards the tree's
// leases; an ending exec takes it alone. hub.mu guards the watchers.
// Order: life, treeState.mu, treeState.leaseMu, Engine.mu, hub.mu. Events are
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
// needs NodeDiskReserve free for each new node. A backend that keeps node
// state on disk (DiskUser: a jail's /tmp) has it added to each node's
// usage. The per-node limits of the
// budget (MaxNodeRAMBytes, MaxNodePids) are the backend's to enforce: it is
// opened with the tree's budget (BackendConfig.Budget), and the engine
// counts only the tree's totals. A commit whose metadata transaction
// fails after Files.Commit has still happened: the error says so and the
// intent finishes it at the next open.
//
// A backend that fails to report RAM leaves the last figures standing
// (logged). A commit leaves the parent's sandbox to the backend: the dir
// and jail parents keep running over their (now changed) files (a jail
// parent's /tmp becomes the child's under its running processes), while a
// vm backend's Commit may make the child's machine the parent's. A fork's
// reply says what became of the source's processes from the backend's Caps
// (Caps.ForkProcesses: "not carried" for jail, "carried" for vm).
package engine
