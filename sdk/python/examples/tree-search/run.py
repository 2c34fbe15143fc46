#!/usr/bin/env python3
"""The tree-search recipe (k7d's loop) over Arbor.

Boot the starting state once, root a tree at it, then per generation:
fork_batch(N) -> run N scripted policies against N copies -> score -> protect the
winner, prune the losers -> let auto_evict hold the budget -> roll forward from the
winner, or roll back to the best node when a generation came out worse.

It prints per generation the fork wall-clock, the scores and the budget use, and
writes a JSON report. Not a training run: the "policy" is a seeded random step on a
small vector kept in the environment's files (state.json), the reward how close it
is to a target. The loop below (``search``) is the template for wiring a trainer.

    python3 run.py --backend dir --branches 4 --generations 6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import arbor  # noqa: E402

POLICY = r'''
import json, random, sys
seed, scale = int(sys.argv[1]), float(sys.argv[2])
s = json.load(open("state.json"))
rnd = random.Random(seed)
s["x"] = [v + rnd.uniform(-scale, scale) for v in s["x"]]
s["steps"] += 1
json.dump(s, open("state.json", "w"))
'''
TARGET = [3.0, -1.0, 2.0]


def boot(base: str) -> None:
    """The starting state every rollout begins from, made once."""
    with open(os.path.join(base, "policy.py"), "w") as f:
        f.write(POLICY)
    with open(os.path.join(base, "state.json"), "w") as f:
        json.dump({"x": [0.0, 0.0, 0.0], "steps": 0}, f)


def act(node: arbor.Node, backend: str, seed: int, scale: float) -> float:
    """Run one scripted policy in the node and return its reward."""
    argv = [sys.executable if backend == "dir" else "python3", "policy.py", str(seed), str(scale)]
    if backend == "dir":  # the node's files are a directory on the host
        subprocess.run(argv, cwd=node.path, check=True)
        state = json.load(open(os.path.join(node.path, "state.json")))
    else:  # a sandbox: run inside it, read through the files API
        node.exec(argv, timeout=60)  # in the top of the node's files (/workspace in a jail)
        state = json.loads(node.files.read("state.json"))
    return reward(state)


def reward(state: dict) -> float:
    return -sum((a - b) ** 2 for a, b in zip(state["x"], TARGET)) ** 0.5


def search(tree: arbor.Tree, backend: str, branches: int, generations: int, scale: float) -> list[dict]:
    best, best_score = tree.root, reward({"x": [0.0] * len(TARGET)})  # boot()'s state
    best.protect()
    current, report = best, []
    with ThreadPoolExecutor(branches) as pool:
        for gen in range(generations):
            t0 = time.perf_counter()
            kids = current.fork(branches)                                  # one fork_batch
            fork_ms = (time.perf_counter() - t0) * 1e3
            daemon_ms = current.last_fork_latency * 1e3                    # measured by arbord
            scores = list(pool.map(lambda ik: act(ik[1], backend, gen * 1000 + ik[0], scale),
                                   enumerate(kids)))
            w = max(range(branches), key=scores.__getitem__)
            kids[w].protect()
            for i, k in enumerate(kids):
                if i != w:
                    k.prune()
            if scores[w] >= best_score:                                    # roll forward
                if best is not tree.root:
                    best.unprotect()
                best, best_score, current, move = kids[w], scores[w], kids[w], "forward"
            else:                                                          # roll back
                kids[w].unprotect()
                kids[w].prune()
                current, move = best.rollback(label=f"g{gen}-retry"), "rollback"
            evicted = tree.auto_evict()
            snap = tree.snapshot()
            row = {"generation": gen, "fork_ms": round(fork_ms, 3),
                   "fork_daemon_ms": round(daemon_ms, 3),
                   "scores": [round(s, 4) for s in scores], "winner": kids[w].id, "move": move,
                   "best": round(best_score, 4), "evicted": [n.id for n in evicted],
                   "live_nodes": snap.usage.live_nodes, "max_live_nodes": snap.budget.max_live_nodes,
                   "total_nodes": snap.usage.total_nodes, "disk_bytes": snap.usage.disk_bytes}
            report.append(row)
            print(f"gen {gen}: fork {fork_ms:7.2f} ms  scores {' '.join(f'{s:7.3f}' for s in scores)}  "
                  f"{move:8s} best {best_score:7.3f}  live {row['live_nodes']}/{row['max_live_nodes']}"
                  f"  nodes {row['total_nodes']}  disk {row['disk_bytes']} B", flush=True)
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="dir", help="dir, jail or vm (whichever the daemon serves)")
    p.add_argument("--branches", type=int, default=4)
    p.add_argument("--generations", type=int, default=6)
    p.add_argument("--scale", type=float, default=1.0, help="the policies' step size")
    p.add_argument("--base", help="the starting state's directory (default: a new temporary one)")
    p.add_argument("--report", default="tree-search-report.json")
    p.add_argument("--keep", action="store_true", help="keep the tree afterwards")
    a = p.parse_args()
    base = a.base or tempfile.mkdtemp(prefix="arbor-tree-search-")
    boot(base)
    client = arbor.Client()
    try:
        tree = arbor.Tree.create(base=base, backend=a.backend,
                                 budget=arbor.Budget(max_live_nodes=a.branches + 3), client=client)
    except (arbor.BadRequestError, arbor.NotSupportedError) as e:
        print(f"backend {a.backend}: not served by this daemon: {e}", file=sys.stderr)
        return 2
    print(f"tree {tree.id} over {base}, backend {a.backend}, {a.branches} branches x {a.generations} generations")
    try:
        report = search(tree, a.backend, a.branches, a.generations, a.scale)
    finally:
        if not a.keep:
            tree.delete()
    with open(a.report, "w") as f:
        json.dump({"backend": a.backend, "branches": a.branches, "generations": report}, f, indent=1)
    print(f"report: {a.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
