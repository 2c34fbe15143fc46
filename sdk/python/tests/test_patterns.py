"""The seven patterns, their examples, and killing attempts, against a real arbord."""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import sys
import threading
import time
import unittest

from tests.daemon import SDK, D, read, setUpModule, tearDownModule  # noqa: F401

import arbor
from arbor.patterns import (Attempt, BeamSearch, BestOfN, Cascaded, Reflexion, Speculate, Tournament,
                            TreeOfThoughts)




def put(a: Attempt, name: str, text: str, mode: str = "w") -> None:
    with open(os.path.join(a, name), mode) as f:
        f.write(text)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


class PatternCase(unittest.TestCase):
    def setUp(self) -> None:
        self.c = D.client("socket")
        self.base = D.base({"f.txt": "start"})
        self.tree = self.c.create_tree(self.base)

    def tearDown(self) -> None:
        self.tree.delete()
        self.c.close()

    def only_root_left(self) -> None:
        self.assertEqual([n.id for n in self.tree.nodes()], [self.tree.root.id])


class TestSpeculate(PatternCase):
    def test_first_success_commits_losers_are_killed(self) -> None:
        pidfile = os.path.join(D.tmp, f"slow-{self.id()}.pid")

        def slow(a: Attempt) -> None:
            a.run(f"sleep 60 & echo $! > {pidfile}; wait")
            put(a, "f.txt", "slow")

        # fast commits once slow runs its process and failing wrote its file (under load,
        # failing may not have written before fast's commit aborted its node: ESTALE).
        failing_wrote = threading.Event()

        def fast(a: Attempt) -> bool:
            while not os.path.exists(pidfile):
                time.sleep(0.01)
            failing_wrote.wait(30)
            put(a, "f.txt", "fast")
            return True

        def failing(a: Attempt) -> bool:
            put(a, "f.txt", "failing")
            failing_wrote.set()
            return False
        t0 = time.monotonic()
        o = Speculate([slow, fast, failing])(self.tree)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertTrue(o.committed)
        self.assertEqual(o.winner.index, 1)
        self.assertTrue(o.results[0].killed)
        self.assertEqual(o.results[2].error, "returned False")
        self.assertEqual(read(self.base, "f.txt"), "fast")
        pid = int(read(pidfile))
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(alive(pid), "the loser's process outlived its attempt")
        self.only_root_left()

    def test_first_commit_wins_race(self) -> None:
        """Every attempt succeeds at the same moment: the daemon lets exactly one commit."""
        n = 6
        barrier = threading.Barrier(n)

        def racer(a: Attempt) -> bool:
            put(a, "f.txt", f"racer {a.index}")
            barrier.wait(10)
            return True
        for _ in range(3):
            o = Speculate([racer] * n)(self.tree)
            committed = [r for r in o.results if r.committed]
            self.assertEqual(len(committed), 1)
            self.assertIs(o.winner, committed[0])
            self.assertEqual(read(self.base, "f.txt"), f"racer {o.winner.index}")
            for r in o.results:
                if r is not o.winner:  # lost the race at the daemon, or killed by the win
                    self.assertTrue(r.stale or r.killed, r)
            self.only_root_left()
            barrier.reset()

    def test_first_commit_wins_race_processes(self) -> None:
        start = time.time() + 1.0  # every forked attempt succeeds at this instant

        def racer(a: Attempt) -> bool:
            put(a, "f.txt", f"proc {a.index} {os.getpid()}")
            time.sleep(max(0.0, start - time.time()))
            return True
        o = Speculate([racer] * 4, runner="process")(self.tree)
        self.assertEqual(sum(r.committed for r in o.results), 1)
        self.assertTrue(read(self.base, "f.txt").startswith(f"proc {o.winner.index} "))
        self.assertNotIn(str(os.getpid()), read(self.base, "f.txt"))  # it ran in a child
        self.only_root_left()

    def test_timeout_kills_everything(self) -> None:
        pidfile = os.path.join(D.tmp, f"hang-{self.id()}.pid")

        def hang(a: Attempt) -> None:
            a.run(f"sh -c 'echo $$ > {pidfile}; exec sleep 60'")

        def spin(a: Attempt) -> None:  # pure Python: only a process runner can kill it
            while True:
                pass
        t0 = time.monotonic()
        o = Speculate([hang], timeout=1.0)(self.tree)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertFalse(o.committed)
        self.assertTrue(o.results[0].killed)
        pid = int(read(pidfile))
        time.sleep(0.2)
        self.assertFalse(alive(pid))
        o = Speculate([spin, spin], timeout=0.5, runner="process")(self.tree)
        self.assertTrue(all(r.killed for r in o.results))
        self.assertEqual(read(self.base, "f.txt"), "start")
        self.only_root_left()

    def test_cancel(self) -> None:
        ev = threading.Event()
        threading.Timer(0.3, ev.set).start()
        o = Speculate([lambda a: a.run("sleep 30")], cancel=ev)(self.tree)
        self.assertTrue(o.results[0].killed)
        self.assertFalse(o.committed)
        self.only_root_left()

    def test_max_parallel_and_no_winner(self) -> None:
        running, peak = [0], [0]
        lock = threading.Lock()

        def fail(a: Attempt) -> bool:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.1)
            with lock:
                running[0] -= 1
            raise RuntimeError(f"attempt {a.index} failed")
        o = Speculate([fail] * 4, max_parallel=2)(self.tree)
        self.assertIsNone(o.winner)
        self.assertEqual(peak[0], 2)
        self.assertEqual([r.error for r in o.results], [f"RuntimeError: attempt {i} failed" for i in range(4)])
        self.only_root_left()


class TestOthers(PatternCase):
    def test_best_of_n(self) -> None:
        def attempt(a: Attempt) -> tuple[bool, float]:
            put(a, "f.txt", str(a.index))
            return True, float(-abs(a.index - 3))
        o = BestOfN(attempt, n=7)(self.tree)
        self.assertEqual((o.winner.index, o.committed), (3, True))
        self.assertEqual(read(self.base, "f.txt"), "3")
        self.assertEqual(o.scores, [-3.0, -2.0, -1.0, 0.0, -1.0, -2.0, -3.0])
        self.only_root_left()
        # evaluate wins over the candidates' own scores; scores[] over the default
        o = BestOfN([attempt] * 3, evaluate=lambda a: float(read(a, "f.txt")))(self.tree)
        self.assertEqual(o.winner.index, 2)
        o = BestOfN([lambda a: put(a, "f.txt", "s")] * 3, scores=[0.1, 0.9, 0.5])(self.tree)
        self.assertEqual(o.winner.index, 1)
        # commit=False: every attempt aborted, scores returned (rollouts)
        o = BestOfN(attempt, n=4, commit=False)(self.tree)
        self.assertFalse(o.committed)
        self.assertEqual(read(self.base, "f.txt"), "s")
        self.only_root_left()

    def test_reflexion(self) -> None:
        seen = []

        def task(a: Attempt, number: int, feedback: str | None) -> bool:
            seen.append((number, feedback))
            put(a, "f.txt", f"try {number}")
            return number == 2
        o = Reflexion(task, max_retries=4, critique=lambda a: "critique of " + read(a, "f.txt"))(self.tree)
        self.assertEqual(seen, [(0, None), (1, "critique of try 0"), (2, "critique of try 1")])
        self.assertEqual((o.winner.number, o.committed), (2, True))
        self.assertEqual(read(self.base, "f.txt"), "try 2")
        o = Reflexion(lambda a, n, fb: False, max_retries=2)(self.tree)
        self.assertEqual((o.winner, len(o.results)), (None, 2))
        self.only_root_left()

    def test_tree_of_thoughts(self) -> None:
        def step(word: str):
            return lambda a: put(a, "f.txt", " " + word, "a")

        def score(a: Attempt) -> float:
            return float(len(read(a, "f.txt")))
        o = TreeOfThoughts([step("a"), step("bbb")], evaluate=score)(self.tree)
        self.assertEqual(read(self.base, "f.txt"), "start bbb")
        o = TreeOfThoughts([step("x"), step("yy")], evaluate=score, max_depth=3,
                           expand=lambda root, depth: [step("d" * depth), step("e" * (depth + 1))])(self.tree)
        self.assertTrue(o.committed)
        self.assertEqual(read(self.base, "f.txt"), "start bbb yy ee eee")
        # a level without a winner aborts the root branch: nothing reaches the base
        o = TreeOfThoughts([step("z")], evaluate=score, max_depth=2,
                           expand=lambda root, depth: [lambda a: False])(self.tree)
        self.assertFalse(o.committed)
        self.assertEqual(read(self.base, "f.txt"), "start bbb yy ee eee")
        self.only_root_left()

    def test_beam_search(self) -> None:
        def digit(d: str):
            return lambda a: put(a, "f.txt", d, "a")

        def value(a: Attempt) -> float:
            return float(read(a, "f.txt").removeprefix("start") or 0)
        o = BeamSearch([digit(d) for d in "152"], expand=lambda a, depth: [digit("3"), digit("8")],
                       evaluate=value, beam_width=2, max_depth=3)(self.tree)
        self.assertTrue(o.committed)
        self.assertEqual(read(self.base, "f.txt"), "start588")
        self.assertEqual(o.winner.score, 588.0)
        self.assertEqual(len(o.results), 3 + 2 * 2 + 2 * 2)
        self.only_root_left()

    def test_tournament(self) -> None:
        words = ["bb", "a", "dddd", "ccc", "eeeee"]

        def draft(a: Attempt) -> bool:
            if a.index == 4:
                return False  # a failed draft does not enter the bracket
            put(a, "f.txt", words[a.index])
            return True
        judged = []

        def judge(x: Attempt, y: Attempt) -> int:
            judged.append((x.index, y.index))
            return 1 if len(read(y, "f.txt")) > len(read(x, "f.txt")) else 0
        o = Tournament([draft] * 5, judge=judge)(self.tree)
        self.assertEqual(read(self.base, "f.txt"), "dddd")
        self.assertEqual(judged, [(0, 1), (2, 3), (0, 2)])
        self.only_root_left()

    def test_cascaded(self) -> None:
        def task(a: Attempt, feedback: list[str]) -> tuple[bool, str]:
            value = len(feedback) + a.index
            put(a, "f.txt", str(value))
            return value == 4, f"{value} is wrong"
        o = Cascaded(task, fan_out=(1, 2, 4))(self.tree)
        self.assertTrue(o.committed)
        self.assertEqual(read(self.base, "f.txt"), "4")
        self.assertEqual([r.number for r in o.results], [0, 1, 1, 2, 2, 2, 2])
        self.assertEqual([r.error for r in o.results[:3]], ["0 is wrong", "1 is wrong", "2 is wrong"])
        o = Cascaded(lambda a, fb: (False, "no"), fan_out=(1, 1))(self.tree)
        self.assertFalse(o.committed)
        self.only_root_left()

    def test_examples_run(self) -> None:
        for path in sorted(glob.glob(os.path.join(SDK, "examples", "*.py"))):
            if os.path.basename(path).startswith("_"):
                continue
            with self.subTest(example=os.path.basename(path)):
                p = subprocess.run([sys.executable, path], env=D.env(), capture_output=True, text=True,
                                   timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("committed: True", p.stdout)


class TestAsync(PatternCase):
    def test_async_candidates_and_arun(self) -> None:
        async def candidate(a: Attempt) -> tuple[bool, float]:
            await asyncio.sleep(0.01 * a.index)
            put(a, "f.txt", f"async {a.index}")
            return True, float(a.index)

        async def main() -> arbor.patterns.Outcome:
            ticks = 0

            async def ticker() -> None:  # the caller's loop runs while the pattern does
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.001)
            t = asyncio.ensure_future(ticker())
            o = await BestOfN(candidate, n=4).arun(self.tree)
            t.cancel()
            self.assertGreater(ticks, 5)
            return o
        o = asyncio.run(main())
        self.assertEqual((o.winner.index, o.committed), (3, True))
        self.assertEqual(read(self.base, "f.txt"), "async 3")
        self.only_root_left()


class TestOnHTTP(unittest.TestCase):
    def test_speculate_over_http(self) -> None:
        with D.client("http") as c:
            base = D.base({"f.txt": "0"})
            t = c.create_tree(base)
            try:
                o = Speculate([lambda a: put(a, "f.txt", "http")])(t)
                self.assertTrue(o.committed)
                self.assertEqual(read(base, "f.txt"), "http")
            finally:
                t.delete()


if __name__ == "__main__":
    arbor  # noqa: B018 - imported for the types above
    unittest.main()
