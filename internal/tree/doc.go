// Package tree is the bookkeeping of snapshot trees: nodes, budgets,
// protection and LRU eviction. It is pure: no I/O, no goroutines, and the
// clock is an argument of every verb that needs one.
//
// # Vocabulary
//
// A Tree holds nodes with engine-style ids ("n1" is the root, then "n2",
// "n3", ... in creation order, never reused). A node is Live (costs its
// RAMBytes), Suspended (state on disk only) or Stale (a sibling committed
// first; only abort and prune apply, and unprotect so that a node protected
// before it went stale can be pruned; protect is refused with api.ErrState). Each node records its fork point:
// ForkGen is the parent's Gen when the node was forked, and every commit into
// a node bumps its Gen. A tree has an api.Budget (max live nodes, max live
// RAM, max disk; zero fields take api.DefaultBudget).
//
// # Lifecycle of a verb: plan, then apply
//
// Every verb is a Plan method (PlanFork, PlanRollback, PlanCommit, PlanAbort,
// PlanPrune, PlanSuspend, PlanResume, PlanProtect, PlanTouch, PlanAutoEvict)
// that computes the verb's whole effect without changing the tree: the nodes
// it creates or changes (Put, with their new values), the nodes it removes
// (Delete), the nodes it evicts and the nodes it makes stale. The engine
// performs the side effects (files), writes the Plan to its store in one
// transaction, and only then calls Apply. A refused verb returns an error
// wrapping an api sentinel and changes nothing. A Plan is valid only for the
// tree version it came from; Apply refuses any other.
//
// # Rules
//
//   - Fork and rollback work from a live or suspended node; the new children
//     are live. Commit needs a leaf child whose parent has not moved past the
//     child's fork point (first commit wins); the parent's Gen goes up and
//     every non-stale sibling with the same fork point becomes stale with its
//     subtree. Abort removes a node and its subtree, protected or not: it
//     names what it drops. Prune removes a node and its subtree, refused with
//     api.ErrProtected (naming the protected node) if any of them is
//     protected. The root can be neither aborted nor pruned.
//   - Eviction suspends live, unprotected nodes that the verb does not use
//     (a fork's source and new children, a resume's node), least recently
//     active first (ties by id), until the tree fits its budget; it keeps
//     going while live RAM is at or above 85% of the RAM budget (Threshold)
//     and some candidate still holds RAM. A fork, rollback or resume that
//     cannot fit even after suspending every candidate is refused with
//     api.ErrBudget and a message with the arithmetic, e.g. "fork 3 children
//     from n1: live nodes 7+3 > max 8; evictable 1 (...)". Eviction frees no
//     disk, so a verb that would exceed the disk budget is refused outright:
//     a fork needs each new node's expected disk (Cost.DiskBytes) free on top
//     of the disk the nodes hold as last measured (SetUsage; the engine
//     measures just before it plans a fork), e.g. "fork 1 child from n2:
//     disk 995328+8192 > max 1000000 bytes; eviction frees no disk".
//     PlanAutoEvict is never refused.
//   - Usage measured later (SetUsage) is never refused; the next eviction
//     pass acts on it.
//
// # What the tests check
//
// TestExhaustive runs every verb (fork of 1 and of 2 children, rollback,
// commit, abort, prune, suspend, resume, protect, unprotect, touch) on every
// node, plus auto-evict, a fork of an unknown node and a fork of no labels,
// on every rooted tree shape of 1..N nodes up to isomorphism (N from
// ARBOR_TREE_EXHAUSTIVE; default 5, 4 under -race), in every reachable
// combination of states (the root live or suspended; a stale node's
// descendants stale) and every subset of protected nodes, with budgets,
// RAM models (none; tight; roomy) and activity orders (distinct; all tied)
// varied across cases. TestRapid runs random sequences of 100-1000 verbs
// (random nodes, including unknown ones) under random budgets and costs with
// a clock that sometimes stands still. After every verb both assert, in
// check_test.go:
//
//  0. Check holds: one root, not stale; every node reachable from the root
//     exactly once; parent and children agree; children in id order; ids
//     below NextID; a stale node's descendants are stale; every non-stale
//     child's ForkGen equals its parent's Gen; the recorded usage equals the
//     sum over nodes; live nodes <= max live nodes. Planning never changes
//     the tree.
//  1. A protected node is never evicted, never suspended except by a
//     suspend naming it, and leaves the tree only by an abort naming it or an
//     ancestor, or by a commit naming it (its state lives on in the parent).
//  2. Eviction never deletes state: the nodes a verb removes are exactly the
//     named subtree (abort, prune) or the committed child (commit), none
//     otherwise; every evicted node is still there, suspended; every
//     live-to-suspended change is an eviction or the named suspend.
//  3. No node is removed while a descendant of it remains.
//  4. The evicted nodes are a prefix of the live, unprotected, unused nodes
//     of the tree before the verb, sorted by last activity then id (computed
//     by the test independently); only fork, rollback, resume and auto-evict
//     evict.
//  5. A verb refused with api.ErrBudget could not have fitted by suspending
//     every candidate (recomputed by the test), and a refused verb of any
//     kind leaves the tree deep-equal to before and wraps an api sentinel;
//     an accepted verb leaves live nodes and live RAM within budget.
//  6. Eviction takes no more than it must: with its last evicted node live
//     again the tree would be over budget or at the 85% threshold; and after
//     an eviction pass that leaves RAM at or above the threshold, no
//     candidate holding RAM is left.
//  7. Verb results: a fork makes exactly the asked-for live children of the
//     source at its current Gen; a commit bumps the parent's Gen, keeps its
//     state, and makes stale exactly the non-stale siblings from the same
//     fork point and their non-stale descendants; nodes a verb did not name,
//     evict or make stale keep their state and protection.
//
// # Sharp edges
//
// A Tree is not safe for concurrent use: the engine holds a per-tree mutex.
// Plans and Nodes share Children slices with the tree; nobody changes a
// Children slice in place (the package always builds a new one).
package tree
