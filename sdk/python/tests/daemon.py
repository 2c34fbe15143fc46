"""A real arbord for the tests: built from this checkout (or $ARBORD), started in a
temporary home with the socket and an HTTP face on a free loopback port, and
stopped by its pid (SIGTERM, which unmounts its trees; SIGKILL after 20 s).

One daemon serves a whole test module: a test module imports ``D``,
``setUpModule`` and ``tearDownModule`` from here, and ``D`` is that module's daemon.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(SDK))
sys.path.insert(0, SDK)

import arbor  # noqa: E402

_built: str | None = None


def arbord_binary() -> str:
    """$ARBORD, else arbord built from the checkout once per test process."""
    global _built
    if os.environ.get("ARBORD"):
        return os.environ["ARBORD"]
    if _built is None:
        go = shutil.which("go") or "/usr/local/go/bin/go"
        out = tempfile.mkdtemp(prefix="arbor-pytest-bin-")
        atexit.register(shutil.rmtree, out, True)
        subprocess.run([go, "build", "-o", out, "./cmd/arbord"], cwd=REPO, check=True)
        _built = os.path.join(out, "arbord")
    return _built


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """One arbord in its own temporary home.

    ``allow_uid`` admits that uid to the socket too (``--allow-uid``; the socket is then in
    a directory it can reach, ``socket_dir``); ``images`` is a directory the daemon's
    $ARBOR_HOME/images links to (the Go tests' image cache, so a run builds an image once).
    """

    def __init__(self, *, allow_uid: int | None = None, images: str | None = None) -> None:
        self.tmp = tempfile.mkdtemp(prefix="arbor-pytest-")
        self.home = os.path.join(self.tmp, "home")
        os.mkdir(self.home)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.socket = os.path.join(self.home, "arbord.sock")
        args = ["--http", f"127.0.0.1:{self.port}"]
        if allow_uid is not None:
            os.chmod(self.tmp, 0o711)  # reachable, not listable
            sock_dir = os.path.join(self.tmp, "sock")
            os.mkdir(sock_dir)
            os.chmod(sock_dir, 0o755)
            self.socket = os.path.join(sock_dir, "arbord.sock")
            args += ["--allow-uid", str(allow_uid), "--socket", self.socket]
        if images is not None:
            os.makedirs(images, exist_ok=True)
            os.symlink(images, os.path.join(self.home, "images"))
        self.log = open(os.path.join(self.tmp, "arbord.log"), "wb")
        self.proc = subprocess.Popen([arbord_binary(), *args],
                                     env={**os.environ, "ARBOR_HOME": self.home}, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with arbor.Client(self.socket, timeout=2) as c:
                    c.ping()
                if os.path.exists(os.path.join(self.home, "http.token")):
                    with arbor.Client(url=self.url, token=self.token, timeout=2) as c:
                        c.ping()
                    break
            except arbor.ArborError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"arbord did not start; its log:\n{self.read_log()}")
            time.sleep(0.05)

    @property
    def token(self) -> str:
        with open(os.path.join(self.home, "http.token")) as f:
            return f.read().strip()

    def env(self) -> dict[str, str]:
        """The environment that points a child process (the CLI, an example) at this daemon."""
        env = {k: v for k, v in os.environ.items() if k not in ("ARBOR_URL", "ARBOR_TOKEN")}
        return {**env, "ARBOR_HOME": self.home, "PYTHONPATH": SDK}

    def client(self, transport: str, **kw: object) -> arbor.Client:
        if transport == "http":
            return arbor.Client(url=self.url, token=self.token, **kw)  # type: ignore[arg-type]
        return arbor.Client(self.socket, **kw)  # type: ignore[arg-type]

    def base(self, files: dict[str, str] | None = None) -> str:
        """A new base directory holding ``files``."""
        d = tempfile.mkdtemp(prefix="base-", dir=self.tmp)
        for name, text in (files or {}).items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return d

    def read_log(self) -> str:
        self.log.flush()
        with open(os.path.join(self.tmp, "arbord.log"), errors="replace") as f:
            return f.read()[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        # A daemon that had to be killed leaves its mounts: detach those under our
        # own directory (and only those) before removing it.
        with open("/proc/self/mountinfo") as f:
            mine = [ln.split()[4] for ln in f if ln.split()[4].startswith(self.tmp + "/")]
        for mp in sorted(mine, reverse=True):
            subprocess.run(["umount", "-l", mp], stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


class _Current:
    """The daemon of the test module running now (see setUpModule)."""

    daemon: Daemon | None = None

    def __getattr__(self, name: str) -> object:
        if _Current.daemon is None:
            raise RuntimeError("no daemon: the test module has no setUpModule from tests.daemon")
        return getattr(_Current.daemon, name)


#: The running test module's daemon.
D: Daemon = _Current()  # type: ignore[assignment]


def required(capability: str) -> bool:
    """ARBOR_TEST_REQUIRE names the capability, or is "all" (internal/testenv's rule)."""
    return any(c.strip() in ("all", capability) for c in os.environ.get("ARBOR_TEST_REQUIRE", "").split(","))


def jail_tree(c: arbor.Client, base: str, *, image: str | None = None,
              network: str | None = None) -> arbor.Tree:
    """A tree on the jail backend (on ``image``, with ``network``), or a skip (a
    failure when the run requires what is missing: root, else cgroups, internal/testenv's
    capabilities) if arbord serves none."""
    try:
        return c.create_tree(base, backend="jail", image=image, network=network)
    except arbor.BadRequestError as e:
        if "is unknown" not in e.message:
            raise
        cap = "root" if os.geteuid() != 0 else "cgroup"
        why = f"arbord serves no jail backend here (needs {cap}): {e.message}"
        if required(cap):
            raise AssertionError(f"{why} (ARBOR_TEST_REQUIRE={os.environ.get('ARBOR_TEST_REQUIRE')})") from e
        raise unittest.SkipTest(why) from e


def setUpModule(*, allow_uid: int | None = None, images: str | None = None) -> None:
    """Start the module's daemon (with :class:`Daemon`'s options)."""
    d = Daemon(allow_uid=allow_uid, images=images)
    # A tree needs a FUSE mount: without one, skip with the daemon's reason, or fail
    # when the run requires FUSE (scripts/test.sh sets ARBOR_TEST_REQUIRE=all).
    try:
        with d.client("socket") as c:
            c.create_tree(d.base()).delete()
    except arbor.UnavailableError as e:
        d.stop()
        if required("fuse"):
            raise
        raise unittest.SkipTest(f"arbord cannot mount trees here: {e}") from e
    _Current.daemon = d


def tearDownModule() -> None:
    if _Current.daemon is not None:
        _Current.daemon.stop()
        _Current.daemon = None


def read(path: str | os.PathLike[str], name: str = "") -> str:
    """A file's text (path, or name inside the directory path)."""
    with open(os.path.join(path, name) if name else path) as f:
        return f.read()
