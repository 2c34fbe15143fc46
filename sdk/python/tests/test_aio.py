"""The asyncio client over both transports against a real arbord."""

from __future__ import annotations

import asyncio
import os
import socket
import time
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


class AsyncSocketLines(unittest.IsolatedAsyncioTestCase):
    """The socket transport's own line framing, deadlines and pool (its hot path is an
    asyncio.Protocol of its own, not the stdlib's StreamReader)."""

    async def test_large_reply(self) -> None:
        async with AsyncClient(D.socket) as c:
            tree = await c.create_tree(D.base(), budget=arbor.Budget(max_live_nodes=400))
            try:
                labels = [f"{i:04d}" + "x" * 200 for i in range(300)]
                kids = await tree.root.fork(labels=labels)
                snap = await tree.snapshot()  # one line of some 130 KB
                self.assertEqual(len(snap.nodes), 301)
                self.assertEqual({n.label for n in snap.nodes if n.id != tree.root.id}, set(labels))
                self.assertEqual(await c.ping(), arbor.__version__)  # the connection is in step
                await asyncio.gather(*(k.abort() for k in kids[:50]))
            finally:
                await tree.delete()

    async def test_deadline_is_per_call(self) -> None:
        """One watchdog timer per connection: calls spread over several timeouts all
        succeed, and a stream's lines after its first have no deadline."""
        with D.client("socket") as sc:  # the tree made and deleted without the short timeout
            tree_id = sc.create_tree(D.base()).id
            try:
                async with AsyncClient(D.socket, timeout=0.5) as c:
                    tree = await c.tree(tree_id)
                    end = time.monotonic() + 1.6
                    n = 0
                    while time.monotonic() < end:
                        await tree.snapshot()
                        await asyncio.sleep(0.05)
                        n += 1
                    self.assertGreater(n, 5)
                    conn = c._t._pool.idle[-1]
                    await asyncio.sleep(0.8)  # an idle connection has no deadline: it stays in use
                    await tree.snapshot()
                    self.assertEqual(c._t._pool.idle, [conn])
                    async with await tree.watch() as w:
                        await asyncio.sleep(1.0)  # idle longer than the call timeout
                        kid = await tree.root.fork()
                        got = []
                        async for ev in w:
                            got.append((ev.kind, ev.node_id))
                            break
                        self.assertEqual(got, [("fork", kid.id)])
            finally:
                sc.call("tree_delete", tree_id=tree_id)

    async def test_daemon_closed_idle_connection_is_redialled(self) -> None:
        async with AsyncClient(D.socket) as c:
            await c.ping()
            idle = list(c._t._pool.idle)
            self.assertTrue(idle)
            for conn in idle:  # as the daemon's idle timeout or a restart would
                sock = conn._t.get_extra_info("socket") if conn._t else None
                assert sock is not None
                sock.shutdown(socket.SHUT_RDWR)
            await asyncio.sleep(0.05)
            self.assertEqual(await c.ping(), arbor.__version__)

    async def _server(self, answer: object) -> tuple[str, list[int], asyncio.AbstractServer]:
        """A socket whose connections are served by ``answer(reader, writer)``; returns its
        path, the count of connections accepted so far, and the server."""
        path = os.path.join(D.tmp, f"lines-{id(answer)}.sock")
        accepted = [0]

        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted[0] += 1
            try:
                await answer(r, w)  # type: ignore[operator]
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                w.close()
        return path, accepted, await asyncio.start_unix_server(serve, path)

    async def test_split_and_joined_lines(self) -> None:
        conns = 0

        async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            nonlocal conns
            conns += 1
            if conns > 1:
                await r.readline()
                return  # dropped with the request unanswered
            await r.readline()  # a reply in pieces, the newline alone at the end
            for piece in (b'{"status":"po', b'ng","vers', b'ion":"x"}', b"\n"):
                w.write(piece)
                await w.drain()
                await asyncio.sleep(0.01)
            await r.readline()  # a reply and an unasked-for line in one write
            w.write(b'{"status":"pong","version":"y"}\n{"status":"error","code":"limit","message":"idle"}\n')
            await w.drain()
            await r.read()
        path, accepted, srv = await self._server(answer)
        async with srv:
            async with AsyncClient(path, timeout=5) as c:
                self.assertEqual(await c.ping(), "x")
                self.assertEqual(await c.ping(), "y")
                self.assertEqual(c._t._pool.idle, [])  # the line after the reply: not reused
                with self.assertRaises(arbor.ConnectionLost):
                    await c.call("tree_commit", tree_id="t", node_id="n")  # a fresh one, dropped
                self.assertEqual(accepted[0], 2)

    async def test_stalled_file_transfer_times_out(self) -> None:
        """A file's chunks each come within the call's timeout (an exec or a watch may pause)."""
        async def stall(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.readline()
            w.write(b'{"status":"file_data","data_b64":"eA=="}\n')
            await w.drain()
            await r.read()
        path, _, srv = await self._server(stall)
        async with srv:
            async with AsyncClient(path, timeout=0.3) as c:
                fs = await c._t.read_file({"op": "file_read", "tree_id": "t", "node_id": "n", "path": "f"})
                self.assertEqual(await anext(fs), b"x")
                t0 = time.monotonic()
                with self.assertRaises(arbor.Timeout):
                    await anext(fs)
                self.assertLess(time.monotonic() - t0, 5)

    async def test_stalled_file_transfer_times_out_blocking(self) -> None:
        """The same with the blocking client (served from a thread)."""
        srv2 = socket.socket(socket.AF_UNIX)
        path2 = os.path.join(D.tmp, "stall-sync.sock")
        srv2.bind(path2)
        srv2.listen()
        loop = asyncio.get_running_loop()

        def serve() -> None:
            conn, _ = srv2.accept()
            conn.recv(4096)
            conn.sendall(b'{"status":"file_data","data_b64":"eA=="}\n')
            time.sleep(2)
            conn.close()
        fut = loop.run_in_executor(None, serve)
        try:
            c2 = arbor.Client(path2, timeout=0.3)
            node = arbor.Tree(c2, "t", "n").root
            with self.assertRaises(arbor.Timeout):
                await loop.run_in_executor(None, node.files.read, "f")
        finally:
            await fut
            srv2.close()

    async def test_timeout_and_dropped_connection(self) -> None:
        async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.read()

        async def drop(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.readline()
        path, _, srv = await self._server(silent)
        async with srv:
            c = AsyncClient(path, timeout=0.3)
            t0 = time.monotonic()
            with self.assertRaises(arbor.Timeout) as cm:
                await c.ping()
            self.assertIsInstance(cm.exception, TimeoutError)
            self.assertLess(time.monotonic() - t0, 3)
            await c.close()
        path, _, srv = await self._server(drop)
        async with srv:
            async with AsyncClient(path) as c:
                with self.assertRaises(arbor.ConnectionLost):
                    await c.call("tree_commit", tree_id="t", node_id="n")


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
