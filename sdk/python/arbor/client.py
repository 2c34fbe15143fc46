"""The blocking client: :class:`Client` (one daemon), :class:`Tree` and :class:`Node`.

Every method is one round trip to arbord (or a stream) and is safe to call from
many threads at once; a wire error raises its typed exception (arbor.errors).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any, overload

from . import _config, _verbs
from ._transport import FileStream, HTTPTransport, SocketTransport, Stream
from .errors import ArborError, NotFoundError, StaleError
from .types import (Budget, Event, ExecResult, FileInfo, ImageBuild, ImageInfo, NodeInfo, Output, ProcessInfo,
                    Snapshot, TreeInfo, Usage)

#: The default per-call timeout in seconds (a reply, not a process: exec has its own).
DEFAULT_TIMEOUT = 60.0


class Client:
    """A connection to one arbord, over its Unix socket or its HTTP face.

    With no arguments it finds the daemon as the CLI does: ``$ARBOR_URL`` (and
    ``$ARBOR_TOKEN`` or HOME/http.token) selects HTTP, otherwise the socket of
    ``$ARBOR_HOME``. ``timeout`` bounds each reply (None: wait forever).
    """

    def __init__(self, socket: str | None = None, *, url: str | None = None, token: str | None = None,
                 home: str | None = None, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        ep = _config.endpoint(socket=socket, url=url, token=token, home_dir=home)
        self.endpoint = ep
        self.timeout = timeout
        self._t: SocketTransport | HTTPTransport
        if ep.url:
            self._t = HTTPTransport(ep.url, ep.token, timeout)
        else:
            assert ep.socket is not None
            self._t = SocketTransport(ep.socket, timeout)

    @property
    def transport(self) -> str:
        """``"socket"`` or ``"http"``."""
        return self._t.name

    def call(self, op: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """One raw request (``op`` and its wire fields); returns the reply dict."""
        return self._t.call({"op": op, **fields}, timeout)

    def stream(self, op: str, timeout: float | None = None, **fields: Any) -> Stream:
        """A raw streaming request; the Stream's ``first`` is the first reply."""
        return self._t.stream({"op": op, **fields}, timeout)

    def ping(self) -> str:
        """The daemon's version."""
        return str(self.call("ping").get("version", ""))

    def trees(self) -> list[TreeInfo]:
        """Every tree the daemon holds."""
        return [TreeInfo.of(t) for t in self.call("tree_list").get("trees") or ()]

    def create_tree(self, base: str | os.PathLike[str], *, backend: str | None = None,
                    budget: Budget | Mapping[str, int] | None = None, tree_id: str | None = None,
                    image: str | None = None, network: str | None = None) -> Tree:
        """Create a tree rooted at the directory ``base`` (see :meth:`Tree.create`)."""
        r = self._t.call(_verbs.create(base, backend, budget, tree_id, image, network))
        t = Tree(self, str(r["tree_id"]), str(r["root"]))
        t.root._path = r.get("path") or None
        return t

    def build_image(self, name: str, *, packages: Sequence[str] | None = None, suite: str | None = None,
                    variant: str | None = None, on_progress: Callable[[str], Any] | None = None,
                    timeout: float | None = None) -> ImageBuild:
        """Build the root filesystem image ``name`` from Debian packages (mmdebstrap: the
        ``suite`` and ``variant`` default to the daemon's, bookworm and minbase; ``packages``
        are added), or find it cached when the same inputs were built before. Each line of
        the build's progress goes to ``on_progress`` as it comes. A jail tree runs on it with
        ``Tree.create(..., backend="jail", image=name)``. Only root and the daemon's uid may
        build (ForbiddenError); over HTTP the token counts as the daemon's uid. ``timeout``
        bounds the wait for the first line (default an hour: a build of the same inputs
        under way is waited for); the build itself may take minutes."""
        col = _verbs.ImageLines(on_progress)
        req = _verbs.image_build(name, suite, variant, packages)
        with self._t.stream(req, timeout or _verbs.IMAGE_FIRST_LINE) as s:
            line: dict[str, Any] | None = s.first
            while line is not None and not col.feed(line):
                line = next(s, None)
        return col.done()

    def images(self) -> list[ImageInfo]:
        """The images the daemon holds, by name."""
        return _verbs.images(self.call("image_list"))

    def remove_image(self, name: str) -> None:
        """Remove the image ``name`` (NotFoundError if there is none; BusyError while a tree
        runs on it; ForbiddenError unless root or the daemon's uid asks). Its files go when
        no other name holds them."""
        self.call("image_rm", image=name)

    def tree(self, tree_id: str) -> Tree:
        """The tree ``tree_id`` (NotFoundError if the daemon has none such)."""
        snap = self.snapshot(tree_id)
        t = Tree(self, tree_id, snap.root)
        t.root._adopt(snap.node(snap.root))
        return t

    def open_tree(self, tree_id: str) -> Tree:
        """Reload a tree the daemon dropped (or had before a restart) from disk."""
        self.call("tree_open", tree_id=tree_id)
        return self.tree(tree_id)

    def snapshot(self, tree_id: str) -> Snapshot:
        """A tree's nodes, usage and budget."""
        return Snapshot.of(self.call("tree_nodes", tree_id=tree_id))

    def watch(self, tree_id: str | None = None) -> Watch:
        """The events of one tree (or of every tree) as an iterator; see :class:`Watch`."""
        return Watch(self._t.stream({"op": "tree_watch", "tree_id": tree_id}))

    def close(self) -> None:
        """Close the idle connections (streams close on their own)."""
        self._t.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default: Client | None = None
_default_lock = threading.Lock()


def _reinit_default_lock() -> None:  # a fork may copy it held by another thread
    global _default_lock
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_reinit_default_lock)


def default_client() -> Client:
    """The process-wide client that Tree.create and friends use when given none."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


class Watch:
    """A tree's events: ``snapshot`` is the state when the watch began; iterate for
    :class:`~arbor.types.Event` values until :meth:`close` or the daemon ends it."""

    def __init__(self, stream: Stream) -> None:
        self._s = stream
        self.snapshot = Snapshot.of(stream.first)

    def __iter__(self) -> Iterator[Event]:
        for line in self._s:
            if line.get("status") == "tree_event" and line.get("event"):
                yield Event.of(line["event"])

    def close(self) -> None:
        self._s.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Tree:
    """A snapshot tree: one lineage of one environment, under a budget."""

    def __init__(self, client: Client, tree_id: str, root_id: str) -> None:
        self.client = client
        self.id = tree_id
        self.root = Node(self, root_id)

    @classmethod
    def create(cls, base: str | os.PathLike[str], *, backend: str | None = None,
               budget: Budget | Mapping[str, int] | None = None, tree_id: str | None = None,
               image: str | None = None, network: str | None = None,
               client: Client | None = None) -> Tree:
        """Create a tree over the directory ``base`` (its root node shows the base's files;
        a commit into the root writes the base). ``backend`` is dir (the default), jail or
        vm where the daemon serves them; ``budget`` a :class:`Budget` or its fields. On a
        jail tree, ``image`` names the image its sandboxes run on (:meth:`Client.build_image`;
        default the host's root) and ``network`` is ``"none"`` (loopback only, the default)
        or ``"outbound"``; the dir backend refuses both (BadRequestError). Only root and
        the daemon's uid may own a jail or vm tree (ForbiddenError)."""
        return (client or default_client()).create_tree(base, backend=backend, budget=budget,
                                                         tree_id=tree_id, image=image, network=network)

    @classmethod
    def get(cls, tree_id: str, *, client: Client | None = None) -> Tree:
        """An existing tree."""
        return (client or default_client()).tree(tree_id)

    def node(self, node_id: str) -> Node:
        """A handle on the node ``node_id`` (no round trip; verbs on it check it exists)."""
        return self.root if node_id == self.root.id else Node(self, node_id)

    def snapshot(self) -> Snapshot:
        """The tree's nodes, usage and budget, now."""
        return self.client.snapshot(self.id)

    def nodes(self) -> list[Node]:
        """Every node, each carrying its state as of this call (``node.info``)."""
        out = []
        for info in self.snapshot().nodes:
            n = self.node(info.id)
            n._adopt(info)
            out.append(n)
        return out

    def usage(self) -> Usage:
        return self.snapshot().usage

    def budget(self) -> Budget:
        return self.snapshot().budget

    def info(self) -> TreeInfo:
        for t in self.client.trees():
            if t.id == self.id:
                return t
        raise NotFoundError(f"tree {self.id!r}: not held by the daemon", op="tree_list")

    def auto_evict(self) -> list[Node]:
        """Suspend least recently used unprotected nodes until the tree fits its budget;
        returns the suspended nodes."""
        r = self.client.call("tree_auto_evict", tree_id=self.id)
        return [self.node(i) for i in r.get("evicted") or ()]

    def watch(self) -> Watch:
        """This tree's events (see :class:`Watch`)."""
        return self.client.watch(self.id)

    def branch(self, label: str | None = None) -> contextlib.AbstractContextManager[Node]:
        """``with tree.branch() as b:`` is ``tree.root.branch()``."""
        return self.root.branch(label)

    def drop(self) -> None:
        """Forget the tree but keep it on disk (:meth:`Client.open_tree` reloads it)."""
        self.client.call("tree_drop", tree_id=self.id)

    def delete(self) -> None:
        """Remove the tree for good (its nodes, layers and metadata; the base stays)."""
        self.client.call("tree_delete", tree_id=self.id)

    def __repr__(self) -> str:
        return f"Tree({self.id!r}, root={self.root.id!r})"


class Node:
    """One state of a tree's environment.

    ``path`` is where its files are on the host while it is live (the dir backend's
    way in); ``exec`` and ``files`` reach it through the backend where it has them.
    """

    __slots__ = ("tree", "id", "label", "_path", "info", "last_fork_latency", "_files")

    def __init__(self, tree: Tree, node_id: str, *, label: str | None = None,
                 path: str | None = None) -> None:
        self.tree = tree
        self.id = node_id
        self.label = label
        self._path = path
        self.info: NodeInfo | None = None
        #: The daemon-measured latency of this node's last fork, in seconds.
        self.last_fork_latency = 0.0
        self._files: Files | None = None

    @property
    def files(self) -> Files:
        """The node's files through the daemon (see :class:`Files`)."""
        if self._files is None:
            self._files = Files(self)
        return self._files

    def _adopt(self, info: NodeInfo) -> None:
        self.info, self._path, self.label = info, info.path, info.label

    @property
    def path(self) -> str | None:
        """The node's files on the host (None when it is not live, or not known yet:
        :meth:`refresh` asks)."""
        return self._path

    def __fspath__(self) -> str:
        if not self._path:
            raise ArborError(f"node {self.id} has no path (not live, or its backend has none)", "bad_state")
        return self._path

    def _call(self, op: str) -> dict[str, Any]:
        return self.tree.client._t.call(_verbs.node(op, self.tree.id, self.id))

    def _child(self, f: dict[str, Any]) -> Node:
        return Node(self.tree, f["node_id"], label=f.get("label") or None, path=f.get("path") or None)

    def refresh(self) -> NodeInfo:
        """Read this node's state from the daemon."""
        info = self.tree.snapshot().node(self.id)
        self._adopt(info)
        return info

    @property
    def state(self) -> str:
        """live, suspended or stale (as of the last refresh)."""
        return (self.info or self.refresh()).state

    @overload
    def fork(self, n: None = None, *, label: str | None = None) -> Node: ...
    @overload
    def fork(self, n: int, *, label: None = None) -> list[Node]: ...
    @overload
    def fork(self, n: None = None, *, labels: Sequence[str]) -> list[Node]: ...

    def fork(self, n: int | None = None, *, label: str | None = None,
             labels: Sequence[str] | None = None) -> Node | list[Node]:
        """``fork()`` makes one child; ``fork(n)`` or ``fork(labels=[...])`` makes a batch
        with one tree_fork_batch (one pause of the source). Children see this node's
        state as of the fork, and never its later writes."""
        req, batch = _verbs.fork(self.tree.id, self.id, n, label, labels)
        r = self.tree.client._t.call(req)
        self.last_fork_latency = int(r.get("latency_ns", 0)) / 1e9
        kids = [self._child(f) for f in _verbs.forks(r)]
        return kids if batch else kids[0]

    def commit(self) -> list[Node]:
        """Make this node's state its parent's (first commit wins: StaleError if a sibling
        committed since the fork). Returns the siblings made stale."""
        r = self._call("tree_commit")
        return [self.tree.node(i) for i in r.get("stale") or ()]

    def abort(self) -> None:
        """Drop this node and its subtree."""
        self._call("tree_abort")

    def rollback(self, label: str | None = None) -> Node:
        """A new child of this (older) node; nothing is destroyed."""
        r = self.tree.client._t.call(dict(_verbs.node("tree_rollback", self.tree.id, self.id), label=label))
        return self._child(_verbs.forks(r)[0])

    def protect(self) -> None:
        """Never evict this node nor prune it implicitly."""
        self._call("tree_protect")

    def unprotect(self) -> None:
        self._call("tree_unprotect")

    def prune(self) -> None:
        """Delete this node and its whole subtree, disk included."""
        self._call("tree_prune")

    def suspend(self) -> None:
        """Put all of this node's state on disk; it costs no RAM until resumed."""
        self._call("tree_suspend")
        self._path = None

    def resume(self) -> Node:
        """Make a suspended node live again (its ``path`` is set anew)."""
        self._path = self._call("tree_resume").get("path") or None
        return self

    @contextlib.contextmanager
    def branch(self, label: str | None = None) -> Iterator[Node]:
        """``with node.branch() as b:`` forks a child, commits it when the block ends
        normally and aborts it when the block raises (BranchContext's rule). A block
        that committed or aborted ``b`` itself is left as it is."""
        child = self.fork(label=label)
        try:
            yield child
        except BaseException:
            with contextlib.suppress(ArborError):
                child.abort()
            raise
        try:
            child.commit()
        except NotFoundError:
            pass  # the block committed or aborted it itself
        except StaleError:
            with contextlib.suppress(ArborError):
                child.abort()  # lost to a sibling: nothing of it is kept
            raise

    def exec(self, argv: Sequence[str] | str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
             timeout: float | None = None, stdin: bytes | str | None = None,
             on_stdout: Callable[[bytes], Any] | None = None,
             on_stderr: Callable[[bytes], Any] | None = None) -> ExecResult:
        """Run a process in this node's sandbox and wait for it; output goes to the
        callbacks as it comes. ``cwd`` is relative to the node's files (a jail's
        /workspace); ``stdin`` is its whole standard input. NotSupportedError on a
        backend without processes (dir)."""
        col = _verbs.ExecCollector(on_stdout, on_stderr)
        for _ in self._exec_lines(_verbs.exec_req(self.tree.id, self.id, argv, cwd, env, timeout, stdin=stdin),
                                  timeout, col):
            pass
        return col.done()

    def exec_stream(self, argv: Sequence[str] | str, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None, timeout: float | None = None,
                    stdin: bytes | str | None = None) -> ExecStream:
        """Run a process and iterate over its :class:`~arbor.types.Output` as it comes;
        the stream's ``result`` is set when it ends."""
        col = _verbs.ExecCollector()
        req = _verbs.exec_req(self.tree.id, self.id, argv, cwd, env, timeout, stdin=stdin)
        return ExecStream(col, self._exec_lines(req, timeout, col))

    def _exec_lines(self, req: dict[str, Any], timeout: float | None,
                    col: _verbs.ExecCollector) -> Iterator[Output]:
        c = self.tree.client
        with c._t.stream(req, _verbs.exec_timeout(c.timeout, timeout)) as s:
            line: dict[str, Any] | None = s.first
            while line is not None:
                if (o := col.feed(line)) is not None:
                    yield o
                # The exit line ends it (the first line, for a process with no output):
                # the daemon sends nothing after it.
                line = next(s, None) if not col.ended else None

    def spawn(self, argv: Sequence[str] | str, *, cwd: str | None = None,
              env: Mapping[str, str] | None = None) -> Process:
        """Start a background process that runs while the node is live."""
        r = self.tree.client._t.call(_verbs.exec_req(self.tree.id, self.id, argv, cwd, env, None, True))
        return Process(self, str(r.get("process_id", "")))

    def processes(self) -> list[Process]:
        """The node's background processes: those running and the last few that ended."""
        r = self.tree.client._t.call(_verbs.node("exec_list", self.tree.id, self.id))
        return [Process(self, p.id, p) for p in _verbs.processes(r)]

    def __repr__(self) -> str:
        return f"Node({self.tree.id!r}, {self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and (other.tree.id, other.id) == (self.tree.id, self.id)

    def __hash__(self) -> int:
        return hash((self.tree.id, self.id))


class ExecStream:
    """Output chunks of a running process; ``result`` once the iteration ended."""

    def __init__(self, col: _verbs.ExecCollector, it: Iterator[Output]) -> None:
        self._col, self._it = col, it

    def __iter__(self) -> Iterator[Output]:
        return self._it

    @property
    def result(self) -> ExecResult:
        return self._col.done()


class Process:
    """A background process of a node (:meth:`Node.spawn`, :meth:`Node.processes`)."""

    def __init__(self, node: Node, process_id: str, info: ProcessInfo | None = None) -> None:
        self.node, self.id, self.info = node, process_id, info

    def kill(self) -> None:
        """Kill the process and every process it started."""
        self.node.tree.client._t.call(dict(_verbs.node("exec_kill", self.node.tree.id, self.node.id),
                                           process_id=self.id))

    def logs(self, *, follow: bool = False) -> ExecStream:
        """What it wrote (the daemon keeps its last 1 MiB) as :class:`~arbor.types.Output`
        chunks; with ``follow``, until it ends. The stream's ``result`` is its exit once it
        ended (ArborError if it still runs)."""
        n = self.node
        req = dict(_verbs.node("exec_logs", n.tree.id, n.id), process_id=self.id, follow=follow or None)
        col = _verbs.ExecCollector()
        return ExecStream(col, n._exec_lines(req, None, col))

    def __repr__(self) -> str:
        return f"Process({self.node.id!r}, {self.id!r})"


class Files:
    """A node's files through the daemon (``node.files``), on every backend. Paths are
    relative to the node's files (a jail's /workspace; ``/tmp/...`` is a jail's /tmp) and
    resolved inside the node. Reads and writes stream in chunks of at most 512 KiB, so a
    file of any size passes without being held whole (:meth:`read` alone collects one)."""

    def __init__(self, node: Node) -> None:
        self._n = node

    def _call(self, op: str, path: str, **kw: Any) -> dict[str, Any]:
        n = self._n
        return n.tree.client._t.call(_verbs.file_req(op, n.tree.id, n.id, path, **kw))

    def read(self, path: str) -> bytes:
        """The whole file."""
        with self.read_chunks(path) as fs:
            return b"".join(fs)

    def read_chunks(self, path: str) -> FileStream:
        """The file's bytes as they come, as an iterator of chunks (close it, or use
        ``with``, to stop early); its ``info`` once the last chunk came."""
        n = self._n
        return n.tree.client._t.read_file(_verbs.file_req("file_read", n.tree.id, n.id, path))

    def download(self, path: str, dest: str | os.PathLike[str] | IO[bytes]) -> FileInfo:
        """Copy the file chunk by chunk into ``dest``: a binary file object, or a local
        path (replaced only once the whole file came)."""
        with self.read_chunks(path) as fs, _verbs.saving(dest) as write:
            for chunk in fs:
                write(chunk)
        return FileInfo.of(fs.info or {})

    def write(self, path: str, data: _verbs.Data, *, mode: int | None = None) -> FileInfo:
        """Replace the file with ``data`` atomically: the file changes only once all of it
        arrived. ``data`` is bytes, text, a binary file object or an iterable of bytes,
        read and sent a chunk at a time."""
        n = self._n
        t = n.tree.client._t
        if (inline := _verbs.small(data)) is not None:  # one request line
            r = t.call(_verbs.file_write(n.tree.id, n.id, path, mode, inline))
        else:
            r = t.call(_verbs.file_write(n.tree.id, n.id, path, mode), input=_verbs.chunks(data))
        return FileInfo.of(r.get("file") or {})

    def upload(self, src: str | os.PathLike[str], path: str, *, mode: int | None = None) -> FileInfo:
        """Copy the local file ``src`` to ``path``, chunk by chunk."""
        with open(src, "rb") as f:
            return self.write(path, f, mode=mode)

    def list(self, path: str = "") -> list[FileInfo]:
        """The entries of a directory, by name."""
        return _verbs.file_list(self._call("file_list", path))

    def stat(self, path: str) -> FileInfo:
        """A file's description (a symlink described, not followed)."""
        return _verbs.file_stat(self._call("file_stat", path))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._call("file_remove", path, recursive=recursive or None)

    def mkdir(self, path: str, *, mode: int | None = None, parents: bool = False) -> FileInfo:
        """Make a directory; with ``parents``, the missing ones above it too (and an
        existing one is no error)."""
        return _verbs.file_stat(self._call("file_mkdir", path, mode=mode, parents=parents or None))
