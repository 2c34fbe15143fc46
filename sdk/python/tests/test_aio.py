"""The asyncio client over both transports against a real arbord."""

from __future__ import annotations

import asyncio
import os
import unittest

from tests.daemon import D, read, setUpModule, tearDownModule  # noqa: F401

import arbor
from arbor.aio import AsyncClient, AsyncNode




class AsyncVerbs:
    transport = "socket"

    async def asyncSetUp(self) -> None:
        kw = {"url": D.url, "token": D.token} if self.transport == "http" else {"socket": D.socket}
        self.c = AsyncClient(**kw)
        self.base = D.base({"a.txt": "base\n"})
        self.tree = await self.c.create_tree(self.base)

    async def asyncTearDown(self) -> None:
        try:
            await self.tree.delete()
        except arbor.NotFoundError:
            pass
        await self.c.close()

    async def test_verbs(self) -> None:
        self.assertEqual(self.c.transport, self.transport)
        self.assertEqual(await self.c.ping(), arbor.__version__)
        self.assertIn(self.tree.id, [t.id for t in await self.c.trees()])
        a, b = await self.tree.root.fork(2)
        self.assertIsInstance(a, AsyncNode)
        with open(os.path.join(a.path, "a.txt"), "w") as f:
            f.write("async\n")
        self.assertEqual({n.id for n in await a.commit()}, {b.id})
        self.assertEqual(read(os.path.join(self.base, "a.txt")), "async\n")
        with self.assertRaises(arbor.StaleError):
            await b.commit()
        await b.abort()
        c = await self.tree.root.fork(label="c")
        self.assertEqual(c.label, "c")
        d = await c.rollback()
        await d.protect()
        self.assertTrue((await d.refresh()).protected)
        with self.assertRaises(arbor.ProtectedError):
            await c.prune()
        await d.unprotect()
        await c.suspend()
        self.assertEqual((await c.refresh()).state, "suspended")
        await c.resume()
        self.assertTrue(c.path)
        self.assertEqual(await self.tree.auto_evict(), [])
        self.assertEqual((await self.tree.usage()).live_nodes, 3)
        await c.prune()
        self.assertEqual([n.id for n in await self.tree.nodes()], [self.tree.root.id])
        await self.tree.drop()
        t = await self.c.open_tree(self.tree.id)
        self.assertEqual(t.root.id, self.tree.root.id)

    async def test_branch(self) -> None:
        async with self.tree.branch() as b:
            with open(os.path.join(b.path, "ok"), "w") as f:
                f.write("1")
        self.assertTrue(os.path.exists(os.path.join(self.base, "ok")))
        with self.assertRaises(KeyError):
            async with self.tree.root.branch() as b:
                with open(os.path.join(b.path, "bad"), "w") as f:
                    f.write("1")
                raise KeyError("x")
        self.assertFalse(os.path.exists(os.path.join(self.base, "bad")))

    async def test_errors(self) -> None:
        with self.assertRaises(arbor.NotFoundError):
            await self.c.tree("missing")
        with self.assertRaises(arbor.StateError):
            await self.tree.root.commit()
        kid = await self.tree.root.fork()
        with self.assertRaises(arbor.NotSupportedError):
            await kid.exec(["true"])
        with self.assertRaises(arbor.NotSupportedError):
            async for _ in kid.exec_stream("true"):
                pass
        with self.assertRaises(arbor.NotSupportedError):
            await kid.files.read("a.txt")
        with self.assertRaises(arbor.NotSupportedError):
            await kid.files.write("a.txt", "x")

    async def test_watch(self) -> None:
        async with await self.tree.watch() as w:
            self.assertEqual(w.snapshot.root, self.tree.root.id)
            kid = await self.tree.root.fork()
            await kid.abort()
            kinds = []
            async for ev in w:
                kinds.append(ev.kind)
                if ev.kind == "abort":
                    break
        self.assertEqual(kinds, ["fork", "abort"])

    async def test_concurrent(self) -> None:
        kids = await asyncio.gather(*(self.tree.root.fork() for _ in range(6)))
        self.assertEqual(len({k.id for k in kids}), 6)
        await asyncio.gather(*(k.refresh() for k in kids for _ in range(5)))
        await asyncio.gather(*(k.abort() for k in kids))
        self.assertEqual((await self.tree.usage()).live_nodes, 1)

    async def test_timeout_and_cancel(self) -> None:
        with self.assertRaises(arbor.Timeout):
            await self.c.call("tree_nodes", timeout=1e-6, tree_id=self.tree.id)
        # a cancelled call leaves the client usable
        task = asyncio.ensure_future(self.tree.snapshot())
        await asyncio.sleep(0)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual((await self.tree.snapshot()).root, self.tree.root.id)


class SocketAsync(AsyncVerbs, unittest.IsolatedAsyncioTestCase):
    transport = "socket"


class HTTPAsync(AsyncVerbs, unittest.IsolatedAsyncioTestCase):
    transport = "http"


class AsyncEndpoints(unittest.IsolatedAsyncioTestCase):
    async def test_no_daemon_and_bad_token(self) -> None:
        with self.assertRaises(arbor.DaemonUnavailable):
            await AsyncClient(os.path.join(D.tmp, "none.sock")).ping()
        c = AsyncClient(url=D.url, token="wrong")
        with self.assertRaises(arbor.AuthError):
            await c.ping()
        await c.close()


if __name__ == "__main__":
    unittest.main()
