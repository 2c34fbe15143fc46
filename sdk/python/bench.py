#!/usr/bin/env python3
"""The SDK's overhead over the raw socket, and BestOfN end to end (docs/BENCHMARKS.md).

Starts its own arbord (built from the checkout, or $ARBORD) in a temporary home, as
the tests do, and prints medians:

- a verb round trip (ping, tree_nodes) and a fork_batch of 10: a bare JSON-lines
  client (one socket, json.dumps/loads; and one asyncio stream) against the SDK's
  blocking and asyncio clients, interleaved round by round; the difference is what
  the SDK adds (each fork's children are aborted over yet another connection);
- BestOfN of 8 attempts (each writes a file and scores itself) end to end: the
  fork_batch, 8 parallel attempts, the commit of the best and 7 aborts;
- a 64 MiB file written and read back through the files verbs, over both transports.

    python3 sdk/python/bench.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tests.daemon import Daemon  # noqa: E402

import arbor  # noqa: E402
from arbor.aio import AsyncClient  # noqa: E402
from arbor.patterns import BestOfN  # noqa: E402


class Raw:
    """The floor: one socket, one line out, one line in."""

    def __init__(self, path: str) -> None:
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rwb")

    def do(self, req: dict) -> dict:
        self.f.write(json.dumps(req).encode() + b"\n")
        self.f.flush()
        return json.loads(self.f.readline())


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out


def files(d: Daemon, tree: arbor.Tree, mib: int) -> None:
    """A file of mib MiB written (from a generator) and read back (chunk by chunk) through
    the daemon's files verbs, over the socket and over HTTP: MB/s, median of 3."""
    block = os.urandom(1 << 20)
    kid = tree.root.fork()
    for transport in ("socket", "http"):
        c = d.client(transport)
        node = c.tree(tree.id).node(kid.id)
        w, r = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            node.files.write("big", (block for _ in range(mib)))
            w.append(mib * 1.048576 / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            n = sum(len(ch) for ch in node.files.read_chunks("big"))
            r.append(mib * 1.048576 / (time.perf_counter() - t0))
            assert n == mib << 20
        print(f"files {mib} MiB over {transport:6s}: write {statistics.median(w):6.0f} MB/s, "
              f"read {statistics.median(r):6.0f} MB/s (median of 3)")
        c.close()
    kid.abort()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--bestofn", type=int, default=20)
    ap.add_argument("--files-mib", type=int, default=64, help="0: skip the file transfers")
    a = ap.parse_args()
    d = Daemon()
    try:
        raw = Raw(d.socket)
        # The aborts between forks go over a connection of their own, so that every
        # client's fork finds its connection as idle as the others' (a connection that has
        # just answered is served sooner by the daemon).
        aborts = Raw(d.socket)
        c = arbor.Client(d.socket)
        tree = c.create_tree(d.base({"f": "0"}), budget=arbor.Budget(max_live_nodes=16))
        root = tree.root.id
        loop = asyncio.new_event_loop()
        ac = AsyncClient(d.socket)
        atree = loop.run_until_complete(ac.tree(tree.id))

        def abort_all(forks: list[str]) -> None:
            for n in forks:
                aborts.do({"op": "tree_abort", "tree_id": tree.id, "node_id": n})

        async def atimed(fn, n: int) -> list[float]:  # awaited in one running loop
            out = []
            for _ in range(n):
                t0 = time.perf_counter_ns()
                await fn()
                out.append(time.perf_counter_ns() - t0)
            return out

        ar, aw = loop.run_until_complete(asyncio.open_unix_connection(d.socket, limit=1 << 24))

        async def araw(req: dict) -> dict:  # the asyncio floor: one stream, one line each way
            aw.write(json.dumps(req).encode() + b"\n")
            await aw.drain()
            return json.loads(await ar.readline())

        verbs = {
            "ping": (lambda: raw.do({"op": "ping"}), c.ping, ac.ping, lambda: araw({"op": "ping"})),
            "tree_nodes": (lambda: raw.do({"op": "tree_nodes", "tree_id": tree.id}), tree.snapshot,
                           atree.snapshot, lambda: araw({"op": "tree_nodes", "tree_id": tree.id})),
        }
        rows = []
        for name, (fr, fs, fa, far) in verbs.items():
            timed(fr, 200)  # warm up
            timed(fs, 200)
            loop.run_until_complete(atimed(fa, 200))
            loop.run_until_complete(atimed(far, 200))
            r, s, y, z = [], [], [], []
            for _ in range(a.rounds // 100):
                r += timed(fr, 100)
                s += timed(fs, 100)
                y += loop.run_until_complete(atimed(fa, 100))
                z += loop.run_until_complete(atimed(far, 100))
            rows.append((name, r, s, y, z))
        r, s, y, z = [], [], [], []
        labels = [""] * 10
        for _ in range(a.batches):
            t0 = time.perf_counter_ns()
            rep = raw.do({"op": "tree_fork_batch", "tree_id": tree.id, "source_id": root, "labels": labels})
            r.append(time.perf_counter_ns() - t0)
            abort_all([f["node_id"] for f in rep["forks"]])
            t0 = time.perf_counter_ns()
            kids = tree.root.fork(10)
            s.append(time.perf_counter_ns() - t0)
            abort_all([k.id for k in kids])
            async def afork() -> list:
                t0 = time.perf_counter_ns()
                akids = await atree.root.fork(10)
                y.append(time.perf_counter_ns() - t0)
                return akids
            abort_all([k.id for k in loop.run_until_complete(afork())])

            async def arawfork() -> dict:
                t0 = time.perf_counter_ns()
                rep = await araw({"op": "tree_fork_batch", "tree_id": tree.id, "source_id": root,
                                  "labels": labels})
                z.append(time.perf_counter_ns() - t0)
                return rep
            abort_all([f["node_id"] for f in loop.run_until_complete(arawfork())["forks"]])
        rows.append(("fork_batch(10)", r, s, y, z))
        print(f"{'verb':16s} {'raw':>8s} {'sync':>8s} {'+sync':>7s} {'aio raw':>8s} {'aio':>8s} {'+aio':>7s}"
              "   (p50, µs)")
        for name, r, s, y, z in rows:
            mr, ms, my, mz = (statistics.median(x) / 1e3 for x in (r, s, y, z))
            print(f"{name:16s} {mr:8.1f} {ms:8.1f} {ms - mr:7.1f} {mz:8.1f} {my:8.1f} {my - mz:7.1f}")

        def attempt(at: arbor.patterns.Attempt) -> tuple[bool, float]:
            with open(os.path.join(at, "f"), "w") as f:
                f.write(str(at.index))
            return True, float(at.index)
        bon = BestOfN(attempt, n=8)
        BestOfN(attempt, n=8)(tree)
        e2e = []
        for _ in range(a.bestofn):
            t0 = time.perf_counter_ns()
            o = bon(tree)
            e2e.append(time.perf_counter_ns() - t0)
            assert o.committed and o.winner.index == 7
        print(f"BestOfN(8) end to end: p50 {statistics.median(e2e) / 1e6:.2f} ms, "
              f"min {min(e2e) / 1e6:.2f} ms, max {max(e2e) / 1e6:.2f} ms over {a.bestofn} runs")
        if a.files_mib:
            files(d, tree, a.files_mib)
        aw.close()
        loop.run_until_complete(ac.close())
        loop.close()
        tree.delete()
        c.close()
    finally:
        d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
