"""exec, background processes and files on the jail backend: a real sandbox per node
(namespaces and a cgroup), through both clients. Skipped where arbord serves no jail
(not root, no cgroups); a failure instead when ARBOR_TEST_REQUIRE asks for them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import unittest

from tests.daemon import SDK, D, jail_tree, read, setUpModule, tearDownModule  # noqa: F401

import arbor
from arbor.aio import AsyncClient
from arbor.patterns import Attempt, Speculate


class JailCase(unittest.TestCase):
    transport = "socket"

    def setUp(self) -> None:
        self.c = D.client(self.transport)
        self.base = D.base({"a.txt": "base\n"})
        self.tree = jail_tree(self.c, self.base)

    def tearDown(self) -> None:
        self.tree.delete()
        self.c.close()


class Exec(JailCase):
    def test_result(self) -> None:
        k = self.tree.root.fork()
        r = k.exec(["/bin/sh", "-c", "cat a.txt; echo oops >&2; exit 3"])
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.signal), (3, b"base\n", b"oops\n", None))
        self.assertFalse(r.ok)
        self.assertGreater(r.duration, 0)
        self.assertEqual(r["exit_code"], 3)
        r = k.exec("mkdir -p sub && echo $FOO > sub/f", env={"FOO": "bar"})
        self.assertTrue(r.ok, r)
        r = k.exec(["/bin/sh", "-c", "pwd; cat f"], cwd="sub")
        self.assertEqual(r.stdout, b"/workspace/sub\nbar\n")
        with self.assertRaises(arbor.BadRequestError):
            k.exec(["true"], cwd="/etc")  # a cwd outside the node's files

    def test_no_output_ends_at_the_exit(self) -> None:
        """The exit line is then the stream's first: nothing follows it."""
        k = self.tree.root.fork()
        t0 = time.monotonic()
        for _ in range(3):
            self.assertTrue(k.exec(["true"]).ok)
        self.assertLess(time.monotonic() - t0, 30)  # not the daemon's 2-minute idle timeout

    def test_streamed_output(self) -> None:
        k = self.tree.root.fork()
        got: list[bytes] = []
        r = k.exec(["/bin/sh", "-c", "printf '\\377\\000bin'; echo one; sleep 0.2; echo two"], on_stdout=got.append)
        self.assertEqual(r.stdout, b"\xff\x00binone\ntwo\n")
        self.assertEqual(b"".join(got), r.stdout)
        s = k.exec_stream("echo out; echo err >&2; exit 4")
        chunks = [(o.stream, o.data) for o in s]
        self.assertIn(("stdout", b"out\n"), chunks)
        self.assertIn(("stderr", b"err\n"), chunks)
        self.assertEqual(s.result.exit_code, 4)

    def test_timeout_kills(self) -> None:
        k = self.tree.root.fork()
        t0 = time.monotonic()
        r = k.exec("sleep 30 & sleep 30", timeout=0.5)
        self.assertLess(time.monotonic() - t0, 20)
        self.assertIsNone(r.exit_code)
        self.assertTrue(r.signal, r)

    def test_nodes_are_apart_and_commit(self) -> None:
        a, b = self.tree.root.fork(2)
        self.assertTrue(a.exec("echo from-a > a.txt && touch new").ok)
        self.assertEqual(b.exec(["cat", "a.txt"]).stdout, b"base\n")
        self.assertEqual(b.exec(["ls"]).stdout, b"a.txt\n")
        self.assertEqual({n.id for n in a.commit()}, {b.id})
        self.assertEqual(read(self.base, "a.txt"), "from-a\n")
        self.assertTrue(os.path.exists(os.path.join(self.base, "new")))
        self.assertEqual(self.tree.root.exec(["cat", "a.txt"]).stdout, b"from-a\n")

    def test_processes_are_apart(self) -> None:
        a, b = self.tree.root.fork(2)
        pa = a.exec("echo $$")
        self.assertTrue(pa.ok, pa)
        self.assertLess(int(pa.stdout), 50)  # its own PID namespace
        p = a.spawn(["sleep", "61"])
        cmdlines = "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
        deadline = time.monotonic() + 20
        while b"sleep 61" not in a.exec(cmdlines).stdout and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn(b"sleep 61", a.exec(cmdlines).stdout)
        self.assertNotIn(b"sleep 61", b.exec(cmdlines).stdout)
        p.kill()

    def test_abort_ends_a_running_exec(self) -> None:
        """The daemon's error line ends the stream in place of the exit, as a typed error."""
        k = self.tree.root.fork()
        threading.Timer(0.5, k.abort).start()
        t0 = time.monotonic()
        with self.assertRaises(arbor.StateError):
            k.exec("echo started; sleep 60", timeout=90)
        self.assertLess(time.monotonic() - t0, 30)  # not the daemon's 2-minute idle timeout

    def test_stdin(self) -> None:
        k = self.tree.root.fork()
        self.assertEqual(k.exec(["cat"], stdin=b"\x00in\n").stdout, b"\x00in\n")
        self.assertEqual(k.exec("wc -c", stdin="abc").stdout.strip(), b"3")

    def test_background_processes(self) -> None:
        k = self.tree.root.fork()
        p = k.spawn(["/bin/sh", "-c", "echo started; echo oops >&2; exec sleep 60"])
        deadline = time.monotonic() + 20
        while len({o.stream for o in p.logs()}) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        logs = p.logs()
        out = [(o.stream, o.data) for o in logs]
        self.assertIn(("stdout", b"started\n"), out)
        self.assertIn(("stderr", b"oops\n"), out)
        with self.assertRaises(arbor.ArborError):
            logs.result  # it still runs
        [info] = [q.info for q in k.processes() if q.id == p.id]
        assert info is not None
        self.assertEqual((info.argv[0], info.exit), ("/bin/sh", None))
        self.assertGreater(info.pid, 0)
        p.kill()
        followed = p.logs(follow=True)
        self.assertIn(b"started\n", b"".join(o.data for o in followed))
        self.assertTrue(followed.result.signal, followed.result)
        [info] = [q.info for q in k.processes() if q.id == p.id]
        assert info is not None and info.exit is not None
        self.assertIsNone(info.exit.exit_code)


class HTTPExec(Exec):
    transport = "http"


class Speculation(JailCase):
    def test_losers_processes_are_killed_through_the_backend(self) -> None:
        started = os.path.join(D.tmp, f"slow-{self.id()}")

        def slow(a: Attempt) -> None:
            open(started, "w").close()
            a.run("sleep 60; echo slow > a.txt")

        def fast(a: Attempt) -> None:
            while not os.path.exists(started):
                time.sleep(0.01)
            a.run("echo fast > a.txt", check=True)

        t0 = time.monotonic()
        o = Speculate([slow, fast], timeout=60)(self.tree)
        self.assertLess(time.monotonic() - t0, 30)  # the slow one did not run its minute
        self.assertTrue(o.committed)
        self.assertEqual(o.winner.index, 1)
        self.assertEqual(read(self.base, "a.txt"), "fast\n")
        self.assertEqual([n.id for n in self.tree.nodes()], [self.tree.root.id])


class Recipe(JailCase):
    def test_tree_search_recipe(self) -> None:
        """examples/tree-search on jail: the policies run through exec in each node's
        sandbox and their state is read through the files verbs."""
        report, base = os.path.join(D.tmp, "jail-report.json"), D.base()
        p = subprocess.run([sys.executable, os.path.join(SDK, "examples", "tree-search", "run.py"),
                            "--backend", "jail", "--branches", "3", "--generations", "3", "--scale", "2",
                            "--report", report, "--base", base], env=D.env(), capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("backend jail", p.stdout)
        for gen in range(3):
            self.assertRegex(p.stdout, rf"gen {gen}: fork +[\d.]+ ms  scores( +-?[\d.]+){{3}}  (forward|rollback)")
        with open(report) as f:
            r = json.load(f)
        self.assertEqual((r["backend"], len(r["generations"])), ("jail", 3))
        best = [g["best"] for g in r["generations"]]
        self.assertEqual(best, sorted(best))
        for g in r["generations"]:
            self.assertLessEqual(g["live_nodes"], g["max_live_nodes"])
            self.assertGreater(g["fork_daemon_ms"], 0)
        self.assertEqual([t for t in self.c.trees() if t.base == base], [])  # deleted after


class CommandLine(JailCase):
    def test_arbor_py_run_and_speculate(self) -> None:
        """The command-line patterns on jail: the commands run through exec in the nodes'
        sandboxes (in the node's copy of the current directory)."""
        def arbor_py(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "arbor", *args], cwd=self.base, env=D.env(),
                                  capture_output=True, text=True, timeout=120)
        p = arbor_py("run", "--tree", self.tree.id, "--", "/bin/sh", "-c", "echo ran > out.txt; pwd")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "/workspace\n")
        self.assertEqual(read(self.base, "out.txt"), "ran\n")
        p = arbor_py("run", "--tree", self.tree.id, "--", "/bin/sh", "-c", "echo no > out.txt; exit 3")
        self.assertEqual(p.returncode, 3)
        self.assertEqual(read(self.base, "out.txt"), "ran\n")  # aborted
        p = arbor_py("speculate", "--tree", self.tree.id, "-c", "sleep 60; echo slow > out.txt",
                     "-c", "echo fast > out.txt")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(read(self.base, "out.txt"), "fast\n")
        self.assertEqual([n.id for n in self.tree.nodes()], [self.tree.root.id])


class AsyncExec:
    transport = "socket"

    async def test_parallel_execs(self) -> None:
        assert isinstance(self, unittest.IsolatedAsyncioTestCase)
        kw = {"url": D.url, "token": D.token} if self.transport == "http" else {"socket": D.socket}
        async with AsyncClient(**kw) as c:  # type: ignore[arg-type]
            with D.client("socket") as sc:
                tree = jail_tree(sc, D.base({"a.txt": "base\n"}))
            try:
                t = await c.tree(tree.id)
                kids = await t.root.fork(4)
                rs = await asyncio.gather(*(k.exec(f"echo {i} >> a.txt; cat a.txt") for i, k in enumerate(kids)))
                self.assertEqual([r.stdout for r in rs], [f"base\n{i}\n".encode() for i in range(4)])
                got: list[bytes] = []
                r = await kids[0].exec(["true"], on_stdout=got.append)
                self.assertEqual((r.exit_code, got), (0, []))
                s = kids[1].exec_stream("echo x; exit 2", stdin="in")
                self.assertEqual([o.data async for o in s], [b"x\n"])
                self.assertEqual(s.result.exit_code, 2)
                p = await kids[2].spawn(["sleep", "60"])
                self.assertIn(p.id, [q.id for q in await kids[2].processes()])
                await p.kill()
                logs = p.logs(follow=True)
                self.assertEqual([o async for o in logs], [])
                self.assertTrue(logs.result.signal)
                await kids[3].files.write("f", b"y" * 700_000)
                self.assertEqual((await kids[3].exec(["wc", "-c", "f"])).stdout.split()[0], b"700000")
            finally:
                await c.call("tree_delete", tree_id=tree.id)


class SocketAsyncExec(AsyncExec, unittest.IsolatedAsyncioTestCase):
    pass


class HTTPAsyncExec(AsyncExec, unittest.IsolatedAsyncioTestCase):
    transport = "http"


if __name__ == "__main__":
    unittest.main()
