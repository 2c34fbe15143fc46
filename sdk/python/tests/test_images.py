"""The image verbs (build_image, images, remove_image) and tree_create's image and network,
on both clients and both transports, against a real arbord.

The module's daemon admits uid 65534 to its socket (to check that only root and the
daemon's uid may build or remove images) and keeps its images in the Go tests' image cache
(internal/testenv.ImageCache: $TMPDIR/arbor-test-images), so the image the Go tests built
in this run (minbase with hello) is found cached; run alone, the test builds it once
(mmdebstrap, about a minute, from Debian's mirror).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import unittest

import arbor
from arbor import _wire
from arbor.aio import AsyncClient
from tests import daemon
from tests.daemon import SDK, D, jail_tree, required, tearDownModule  # noqa: F401

#: internal/testenv.ImageCache (os.TempDir honours $TMPDIR, as tempfile does).
IMAGE_CACHE = os.path.join(tempfile.gettempdir(), "arbor-test-images")
#: The uid admitted to the socket that is neither root nor the daemon's.
OTHER_UID = 65534


def setUpModule() -> None:
    daemon.setUpModule(allow_uid=OTHER_UID, images=IMAGE_CACHE)


def need(capability: str, have: bool, why: str) -> None:
    """Skip unless have, or fail when the run requires the capability."""
    if not have:
        if required(capability):
            raise AssertionError(f"{why} (ARBOR_TEST_REQUIRE={os.environ.get('ARBOR_TEST_REQUIRE')})")
        raise unittest.SkipTest(why)


def aclient(transport: str) -> AsyncClient:
    """An asyncio client of the module's daemon over transport."""
    if transport == "http":
        return AsyncClient(url=D.url, token=D.token)
    return AsyncClient(D.socket)


class ImageVerbs(unittest.TestCase):
    def test_list_and_remove_missing(self) -> None:
        for transport in ("socket", "http"):
            with self.subTest(transport=transport), D.client(transport) as c:
                self.assertIsInstance(c.images(), list)
                with self.assertRaises(arbor.NotFoundError) as cm:
                    c.remove_image("pytest-no-such-image")
                self.assertEqual(cm.exception.code, "not_found")
                with self.assertRaises(arbor.BadRequestError):
                    c.remove_image("../x")  # not a name
                with self.assertRaises(arbor.BadRequestError):
                    c.build_image("pytest-x", packages=["Not A Package"])

    def test_list_and_remove_missing_async(self) -> None:
        async def run(transport: str) -> None:
            async with aclient(transport) as c:
                self.assertIsInstance(await c.images(), list)
                with self.assertRaises(arbor.NotFoundError):
                    await c.remove_image("pytest-no-such-image")
                with self.assertRaises(arbor.BadRequestError):
                    await c.build_image("pytest-x", packages=["Not A Package"])
        for transport in ("socket", "http"):
            with self.subTest(transport=transport):
                asyncio.run(run(transport))

    def test_dir_tree_refuses_image_and_network(self) -> None:
        base = D.base({"f": "x"})
        for transport in ("socket", "http"):
            with self.subTest(transport=transport), D.client(transport) as c:
                with self.assertRaises(arbor.BadRequestError):
                    arbor.Tree.create(base, backend="dir", image="pytest-hello", client=c)
                with self.assertRaises(arbor.BadRequestError):
                    arbor.Tree.create(base, backend="dir", network="outbound", client=c)

                async def aio() -> None:
                    async with aclient(transport) as ac:
                        with self.assertRaises(arbor.BadRequestError):
                            await ac.create_tree(base, backend="dir", network="outbound")
                asyncio.run(aio())
                self.assertEqual(c.trees(), [], "a refused create left a tree")

    def test_http_routes(self) -> None:
        self.assertEqual(_wire.http_route({"op": "image_list"}), ("GET", "/v1/images", None))
        self.assertEqual(_wire.http_route({"op": "image_rm", "image": "a b"}),
                         ("DELETE", "/v1/images/a%20b", None))
        self.assertEqual(_wire.http_route({"op": "image_build", "image": "i", "packages": ["hello"],
                                           "stream": True}),
                         ("POST", "/v1/images?stream=ndjson", {"image": "i", "packages": ["hello"]}))
        self.assertEqual(_wire.http_route({"op": "tree_create", "base": "/b", "backend": "jail",
                                           "image": "i", "network": "outbound"})[2],
                         {"base": "/b", "backend": "jail", "image": "i", "network": "outbound"})
        with self.assertRaises(arbor.BadRequestError):
            _wire.http_route({"op": "image_rm"})


#: What uid 65534 runs: each verb's outcome, one line each ("ok", or its error's class).
_OTHER = r"""
import asyncio, sys
import arbor
from arbor.aio import AsyncClient

sock, base = sys.argv[1], sys.argv[2]

def outcome(f):
    try:
        f()
        return "ok"
    except arbor.ArborError as e:
        return type(e).__name__ + (" unknown-backend" if "is unknown" in e.message else "")

async def aio():
    async with AsyncClient(sock) as c:
        try:
            await c.build_image("pytest-other", packages=["hello"])
            return "ok"
        except arbor.ArborError as e:
            return type(e).__name__

with arbor.Client(sock) as c:
    print("images", outcome(c.images))
    print("build", outcome(lambda: c.build_image("pytest-other", packages=["hello"])))
    print("remove", outcome(lambda: c.remove_image("pytest-other")))
    print("jail", outcome(lambda: c.create_tree(base, backend="jail")))
    print("dir", outcome(lambda: c.create_tree(base).delete()))
print("aio-build", asyncio.run(aio()))
"""


class OtherUID(unittest.TestCase):
    def test_only_root_and_the_daemons_uid_change_images(self) -> None:
        need("root", os.geteuid() == 0, "running a client as another uid needs root")
        # The SDK where uid 65534 can read it, and a base of its own.
        pub = os.path.join(D.tmp, "pub")
        shutil.copytree(os.path.join(SDK, "arbor"), os.path.join(pub, "arbor"))
        os.makedirs(os.path.join(pub, "base"))
        for dirpath, dirs, files in os.walk(pub):
            os.chmod(dirpath, 0o755)
            for f in files:
                os.chmod(os.path.join(dirpath, f), 0o644)
        os.chown(os.path.join(pub, "base"), OTHER_UID, OTHER_UID)  # a base is its owner's to name
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3") or "python3"
        r = subprocess.run([python, "-c", _OTHER, D.socket, os.path.join(pub, "base")], user=OTHER_UID,
                           group=OTHER_UID, extra_groups=[], cwd=pub, capture_output=True, text=True,
                           timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pub, "HOME": pub})
        self.assertEqual(r.returncode, 0, r.stderr)
        got = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        self.assertEqual(got["images"], "ok")
        self.assertEqual(got["build"], "ForbiddenError")
        self.assertEqual(got["remove"], "ForbiddenError")
        self.assertEqual(got["aio-build"], "ForbiddenError")
        self.assertEqual(got["dir"], "ok")
        if not got["jail"].endswith("unknown-backend"):  # where the daemon serves jail trees
            self.assertEqual(got["jail"], "ForbiddenError")
        with D.client("socket") as c:
            self.assertNotIn("pytest-other", [i.name for i in c.images()])


class BuildImage(unittest.TestCase):
    """A real build (cached when the Go tests built the same inputs this run), then a jail
    tree running the image's program."""

    def test_build_run_remove(self) -> None:
        need("root", os.geteuid() == 0, "building images needs root (mmdebstrap's root mode)")
        need("mmdebstrap", shutil.which("mmdebstrap") is not None, "mmdebstrap is not installed")
        # The spec internal/daemon's TestJailTreeOnImage builds: minbase and hello.
        lines: list[str] = []
        with D.client("socket") as c:
            built = c.build_image("pytest-hello", packages=["hello"], on_progress=lines.append)
            self.assertEqual(built.image.name, "pytest-hello")
            self.assertEqual(built.image.variant, "minbase")
            self.assertIn("hello", built.image.packages)
            self.assertTrue(built.image.id)
            self.assertGreater(built.image.size_bytes, 0)
            self.assertTrue(lines, "no progress line came")

        # Again, on the other transport and the other client: cached, one progress line.
        for transport in ("http", "socket"):
            with self.subTest(transport=transport), D.client(transport) as c:
                lines = []
                again = c.build_image("pytest-hello", packages=["hello"], on_progress=lines.append)
                self.assertTrue(again.cached)
                self.assertEqual(again.image.id, built.image.id)
                self.assertEqual(len(lines), 1, lines)
                self.assertIn("cached", lines[0])

        async def aio(transport: str) -> arbor.ImageBuild:
            async with aclient(transport) as ac:
                seen: list[str] = []
                b = await ac.build_image("pytest-hello-alias", packages=["hello"], on_progress=seen.append)
                self.assertTrue(seen)
                self.assertIn("pytest-hello-alias", [i.name for i in await ac.images()])
                return b
        for transport in ("http", "socket"):
            with self.subTest(transport=transport, client="aio"):
                alias = asyncio.run(aio(transport))
                self.assertTrue(alias.cached)
                self.assertEqual(alias.image.id, built.image.id)

        with D.client("http") as c:
            names = {i.name: i for i in c.images()}
            self.assertEqual(names["pytest-hello"].id, built.image.id)
            # Removing one name keeps the files the other holds.
            c.remove_image("pytest-hello-alias")
            self.assertNotIn("pytest-hello-alias", [i.name for i in c.images()])
            with self.assertRaises(arbor.NotFoundError):
                c.remove_image("pytest-hello-alias")

        with D.client("socket") as c:
            base = D.base({"f": "from the base\n"})
            tree = jail_tree(c, base, image="pytest-hello", network="none")
            try:
                info = tree.info()
                self.assertEqual(info.image, "pytest-hello")
                r = tree.root.exec(["/bin/sh", "-c", "hello; cat /workspace/f"], timeout=60)
                self.assertEqual(r.exit_code, 0, r.stderr)
                self.assertEqual(r.stdout, b"Hello, world!\nfrom the base\n")
                with self.assertRaises(arbor.BusyError):  # a tree runs on it
                    c.remove_image("pytest-hello")
            finally:
                tree.delete()
