"""A node's files through the daemon (file_read/write/list/stat/remove/mkdir), over both
transports with both clients: on the dir backend, and on the jail backend where arbord
serves it (tests/daemon.py's jail_tree). Large files stream in chunks both ways."""

from __future__ import annotations

import asyncio
import io
import os
import tracemalloc
import unittest
from collections.abc import AsyncIterator, Iterator

from tests.daemon import D, jail_tree, read, setUpModule, tearDownModule  # noqa: F401

import arbor
from arbor.aio import AsyncClient

MiB = 1 << 20


def pattern(n: int, seed: int = 7) -> bytes:
    """n bytes that are not all alike (every chunk of a transfer differs)."""
    block = bytes((i * seed + i // 251) & 0xFF for i in range(MiB))
    return (block * (n // MiB + 1))[:n]


class FilesCase:
    transport = "socket"
    backend = "dir"

    def setUp(self) -> None:
        self.c = D.client(self.transport)
        self.base = D.base({"a.txt": "base\n"})
        self.tree = jail_tree(self.c, self.base) if self.backend == "jail" else self.c.create_tree(self.base)

    def tearDown(self) -> None:
        self.tree.delete()
        self.c.close()

    def test_verbs(self) -> None:
        assert isinstance(self, unittest.TestCase)
        kid = self.tree.root.fork()
        f = kid.files
        self.assertEqual(f.read("a.txt"), b"base\n")
        self.assertEqual(f.read("/a.txt"), b"base\n")  # a leading / is the node's top
        info = f.write("b.bin", b"\x00\xffbin", mode=0o600)
        self.assertEqual((info.size, info.mode & 0o777, info.type), (5, 0o600, "file"))
        self.assertEqual(f.read("b.bin"), b"\x00\xffbin")
        self.assertEqual(f.stat("b.bin").mode & 0o777, 0o600)
        self.assertTrue(f.mkdir("d/e/f", parents=True).is_dir)
        f.write("d/e/f/g.txt", "text é")
        self.assertEqual(f.read("d/e/f/g.txt").decode(), "text é")
        self.assertEqual([(e.name, e.is_dir) for e in f.list("")], [("a.txt", False), ("b.bin", False), ("d", True)])
        self.assertEqual([e.name for e in f.list("d/e/f")], ["g.txt"])
        with self.assertRaises(arbor.NotFoundError):
            f.read("missing")
        with self.assertRaises(arbor.ArborError):
            f.remove("d")  # not empty
        f.remove("d", recursive=True)
        f.remove("a.txt")
        self.assertEqual([e.name for e in f.list()], ["b.bin"])
        with self.assertRaises(arbor.NotFoundError):
            f.read("../../etc/passwd")  # resolved inside the node, which has no etc/
        f.write("../../up.txt", "kept inside")
        self.assertEqual(f.read("up.txt"), b"kept inside")
        f.remove("up.txt")
        # the root still has what the base had, until the kid commits
        self.assertEqual(self.tree.root.files.read("a.txt"), b"base\n")
        kid.commit()
        self.assertEqual(sorted(os.listdir(self.base)), ["b.bin"])

    def test_large_files_stream(self) -> None:
        assert isinstance(self, unittest.TestCase)
        kid = self.tree.root.fork()
        data = pattern(3 * MiB + 12345)
        self.assertEqual(kid.files.write("big", data).size, len(data))
        with kid.files.read_chunks("big") as fs:
            chunks = list(fs)
        self.assertGreater(len(chunks), 1)
        self.assertEqual(b"".join(chunks), data)
        self.assertEqual(fs.info and fs.info.get("size"), len(data))
        self.assertEqual(kid.files.read("big"), data)
        local = os.path.join(D.tmp, f"down-{self.id()}")
        self.assertEqual(kid.files.download("big", local).size, len(data))
        self.assertEqual(open(local, "rb").read(), data)
        buf = io.BytesIO()
        kid.files.download("big", buf)
        self.assertEqual(buf.getvalue(), data)
        self.assertEqual(kid.files.upload(local, "copy").size, len(data))
        self.assertEqual(kid.files.read("copy"), data)
        with self.assertRaises(arbor.NotFoundError):
            kid.files.download("missing", local)
        self.assertEqual(open(local, "rb").read(), data)  # a failed download leaves it alone

    def test_refused_upload_is_its_error(self) -> None:
        """A large write the daemon refuses at once (no such node) raises the refusal, not a
        connection reset mid-body, and the client goes on."""
        assert isinstance(self, unittest.TestCase)
        data = pattern(8 * MiB)
        with self.assertRaises(arbor.NotFoundError):
            self.tree.node("n999").files.write("x", data)
        with self.assertRaises(arbor.NotFoundError):
            self.tree.node("n999").files.write("x", iter([data]))
        self.assertEqual(self.c.ping(), arbor.__version__)
        kid = self.tree.root.fork()
        self.assertEqual(kid.files.write("x", data).size, len(data))

    def test_write_streams_from_a_generator(self) -> None:
        """24 MiB written from a generator and read back chunk by chunk, with at most a
        few chunks held at once on this side."""
        assert isinstance(self, unittest.TestCase)
        kid = self.tree.root.fork()
        block = pattern(MiB)

        def gen() -> Iterator[bytes]:
            for i in range(24):
                yield block[i:] + block[:i]
        tracemalloc.start()
        try:
            kid.files.write("gen", gen())
            n = 0
            for chunk in kid.files.read_chunks("gen"):
                n += len(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertEqual(n, 24 * MiB)
        self.assertLess(peak, 8 * MiB)
        self.assertEqual(kid.files.stat("gen").size, 24 * MiB)


class SocketDir(FilesCase, unittest.TestCase):
    pass


class HTTPDir(FilesCase, unittest.TestCase):
    transport = "http"


class SocketJail(FilesCase, unittest.TestCase):
    backend = "jail"

    def test_tmp_and_exec_see_the_files(self) -> None:
        kid = self.tree.root.fork()
        kid.files.write("w.txt", "from the sdk\n")
        self.assertEqual(kid.exec(["cat", "w.txt"]).stdout, b"from the sdk\n")
        self.assertTrue(kid.exec("echo from-exec > /tmp/t.txt").ok)
        self.assertEqual(kid.files.read("/tmp/t.txt"), b"from-exec\n")


class HTTPJail(FilesCase, unittest.TestCase):
    transport = "http"
    backend = "jail"


class AsyncFiles:
    transport = "socket"

    async def test_files(self) -> None:
        assert isinstance(self, unittest.IsolatedAsyncioTestCase)
        kw = {"url": D.url, "token": D.token} if self.transport == "http" else {"socket": D.socket}
        async with AsyncClient(**kw) as c:  # type: ignore[arg-type]
            base = D.base({"a.txt": "base\n"})
            tree = await c.create_tree(base)
            try:
                kid = await tree.root.fork()
                f = kid.files
                self.assertEqual(await f.read("a.txt"), b"base\n")
                self.assertEqual((await f.write("s", "small", mode=0o640)).mode & 0o777, 0o640)
                self.assertEqual(await f.read("s"), b"small")
                data = pattern(2 * MiB + 7, seed=3)

                async def agen() -> AsyncIterator[bytes]:
                    for i in range(0, len(data), 300_000):
                        await asyncio.sleep(0)
                        yield data[i:i + 300_000]
                self.assertEqual((await f.write("big", agen())).size, len(data))
                self.assertEqual((await f.write("big2", data)).size, len(data))
                chunks = [ch async for ch in await f.read_chunks("big")]
                self.assertGreater(len(chunks), 1)
                self.assertEqual(b"".join(chunks), data)
                self.assertEqual(await f.read("big2"), data)
                local = os.path.join(D.tmp, f"adown-{self.transport}")
                self.assertEqual((await f.download("big", local)).size, len(data))
                with open(local, "rb") as fh:
                    self.assertEqual(fh.read(), data)
                self.assertEqual((await f.upload(local, "up")).size, len(data))
                self.assertTrue((await f.mkdir("x/y", parents=True)).is_dir)
                self.assertEqual([e.name for e in await f.list()], ["a.txt", "big", "big2", "s", "up", "x"])
                self.assertEqual((await f.stat("up")).size, len(data))
                await f.remove("x", recursive=True)
                with self.assertRaises(arbor.NotFoundError):
                    await f.read("x/y")
                big = pattern(8 * MiB)
                with self.assertRaises(arbor.NotFoundError):  # refused at once, not a reset
                    await tree.node("n999").files.write("x", big)
                self.assertEqual(await c.ping(), arbor.__version__)
            finally:
                await tree.delete()


class SocketAsyncFiles(AsyncFiles, unittest.IsolatedAsyncioTestCase):
    pass


class HTTPAsyncFiles(AsyncFiles, unittest.IsolatedAsyncioTestCase):
    transport = "http"


if __name__ == "__main__":
    unittest.main()
