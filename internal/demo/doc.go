// Package demo holds Arbor's demos; its one concept is the coding-agent fork
// (`arbor demo coding-agent`), forkd's recipes/coding-agent-fork reproduced
// through the tree verbs and then carried one step further with a commit.
//
// # Vocabulary
//
//   - agent: one node of the demo's tree and the shell script that works in
//     its files. "source" builds the workspace; "minimal", "rewrite" and
//     "skip" are its three children, one per fix strategy.
//   - workspace: where an agent works. On a jail tree (the default where the
//     daemon serves one and the client can exec) it is /tmp/workspace in the
//     node's sandbox, as forkd's recipe keeps it in /tmp: the agent runs
//     there through tree_exec, the node's fork carries it (the node's /tmp
//     is node state), and the demo reads it by copying it out (a tar from
//     inside, vendored.bin left out and summed inside). On a dir tree it is
//     the node's files at its Path on the host, and agents are ordinary
//     host processes (sh, python3) working there, as BranchFS users work.
//     On a vm tree (--backend vm) the agents run in their nodes' microVMs
//     the same way: /tmp/workspace is in the guest's tmpfs, in its RAM, and
//     the one fork_batch of the live source VM carries it in memory (the
//     guest's busybox tar copies it out). The summary adds, on jail and vm,
//     each child's time from the fork call to running (start_ns) and to
//     its first exec reply, and each agent's RAM from tree_nodes (PSS on vm).
//   - backend: jail, vm or dir (Config.Backend; vm only when asked); where the demo chose dir
//     because sandboxes are not possible, it says so in one line.
//   - evidence: what the demo measures in each workspace: md5 and size of
//     build-artifacts/vendored.bin, the md5 of the __pycache__ trees (at the
//     fork and after the child re-ran its tests), mathy/__init__.py, and the
//     outcome parsed from the last unittest summary line of .agent-log.
//
// # Lifecycle
//
// CodingAgent makes a base directory, tree_create (jail, else dir), tree_fork of the source
// from the root, runs setup-source.sh in the source, samples it, makes the
// three children with ONE tree_fork_batch, samples each child's __pycache__
// before it runs, runs the three strategies concurrently, collects the
// evidence and writes results/<UTC time, e.g. 2026-12-01T18-05-12Z>/. Then it commits the best passing
// child into the source with tree_commit (the passing child with the smallest
// line diff of the workspace's Python sources against the fork point, ties
// broken in label order), shows with tree_nodes that the siblings are stale,
// re-runs the tests in the source and appends a commit section to the
// summary. Last it deletes the tree and its disk (unless Config.KeepTree);
// results stay.
//
// # Sharp edges
//
//   - Python trusts a .pyc whose recorded source mtime (whole seconds) and
//     size match the source file. minimal.sh's sed keeps the size, so if it
//     ran within the same second as the source's test run the child would
//     execute stale bytecode and "fail". The demo waits until the wall clock
//     has left the second of the source's last write before the children run
//     (forkd's run had seconds between the two by construction).
//   - PYTHONDONTWRITEBYTECODE and PYTHONPYCACHEPREFIX would hide __pycache__;
//     the demo removes them from the agents' environment and the scripts
//     unset them too.
//   - The __pycache__ md5 follows forkd: md5 of every regular file under any
//     __pycache__ directory, listed as "<md5>  <path relative to the
//     workspace>" lines sorted by path, then the md5 of that list.
//   - The expected outcomes are fixed by the scripts; a run whose evidence
//     differs is reported in Summary.Checks and returned as ErrCheck.
package demo
