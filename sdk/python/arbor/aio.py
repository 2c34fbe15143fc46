"""The asyncio client: :class:`AsyncClient`, :class:`AsyncTree`, :class:`AsyncNode`,
with the same methods as the blocking ones (``await``-ed), streams as async
iterators, and ``async with node.branch() as b:``.

    from arbor.aio import AsyncClient
    async with AsyncClient() as c:
        tree = await c.create_tree("./app")
        kids = await tree.root.fork(4)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from typing import IO, Any, overload

from . import _config, _verbs
from ._aiotransport import AsyncFileStream, AsyncHTTPTransport, AsyncSocketTransport, AsyncStream, Input
from .client import DEFAULT_TIMEOUT
from .errors import ArborError, NotFoundError, StaleError
from .types import (Budget, Event, ExecResult, FileInfo, ImageBuild, ImageInfo, NodeInfo, Output, ProcessInfo,
                    Snapshot, TreeInfo, Usage)

__all__ = ["AsyncClient", "AsyncTree", "AsyncNode", "AsyncWatch", "AsyncFiles", "AsyncProcess",
           "AsyncExecStream", "AsyncFileStream"]


class AsyncClient:
    """A connection to one arbord, as :class:`arbor.Client` but for asyncio."""

    def __init__(self, socket: str | None = None, *, url: str | None = None, token: str | None = None,
                 home: str | None = None, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        ep = _config.endpoint(socket=socket, url=url, token=token, home_dir=home)
        self.endpoint, self.timeout = ep, timeout
        self._t: AsyncSocketTransport | AsyncHTTPTransport
        if ep.url:
            self._t = AsyncHTTPTransport(ep.url, ep.token, timeout)
        else:
            assert ep.socket is not None
            self._t = AsyncSocketTransport(ep.socket, timeout)

    @property
    def transport(self) -> str:
        return self._t.name

    async def call(self, op: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        return await self._t.call({"op": op, **fields}, timeout)

    async def stream(self, op: str, timeout: float | None = None, **fields: Any) -> AsyncStream:
        return await self._t.stream({"op": op, **fields}, timeout)

    async def ping(self) -> str:
        return str((await self.call("ping")).get("version", ""))

    async def trees(self) -> list[TreeInfo]:
        return [TreeInfo.of(t) for t in (await self.call("tree_list")).get("trees") or ()]

    async def create_tree(self, base: str | os.PathLike[str], *, backend: str | None = None,
                          budget: Budget | Mapping[str, int] | None = None,
                          tree_id: str | None = None, image: str | None = None,
                          network: str | None = None) -> AsyncTree:
        r = await self._t.call(_verbs.create(base, backend, budget, tree_id, image, network))
        t = AsyncTree(self, str(r["tree_id"]), str(r["root"]))
        t.root._path = r.get("path") or None
        return t

    async def build_image(self, name: str, *, packages: Sequence[str] | None = None, suite: str | None = None,
                          variant: str | None = None, on_progress: Callable[[str], Any] | None = None,
                          timeout: float | None = None) -> ImageBuild:
        """Build (or find cached) the image ``name`` (see :meth:`arbor.Client.build_image`);
        cancelling the call cancels the build."""
        col = _verbs.ImageLines(on_progress)
        req = _verbs.image_build(name, suite, variant, packages)
        async with await self._t.stream(req, timeout or _verbs.IMAGE_FIRST_LINE) as s:
            line: dict[str, Any] | None = s.first
            while line is not None and not col.feed(line):
                line = await anext(s, None)
        return col.done()

    async def images(self) -> list[ImageInfo]:
        return _verbs.images(await self.call("image_list"))

    async def remove_image(self, name: str) -> None:
        await self.call("image_rm", image=name)

    async def tree(self, tree_id: str) -> AsyncTree:
        snap = await self.snapshot(tree_id)
        t = AsyncTree(self, tree_id, snap.root)
        t.root._adopt(snap.node(snap.root))
        return t

    async def open_tree(self, tree_id: str) -> AsyncTree:
        await self.call("tree_open", tree_id=tree_id)
        return await self.tree(tree_id)

    async def snapshot(self, tree_id: str) -> Snapshot:
        return Snapshot.of(await self.call("tree_nodes", tree_id=tree_id))

    async def watch(self, tree_id: str | None = None) -> AsyncWatch:
        return AsyncWatch(await self._t.stream({"op": "tree_watch", "tree_id": tree_id}))

    async def close(self) -> None:
        await self._t.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncWatch:
    """A tree's events as an async iterator; ``snapshot`` is the state when it began."""

    def __init__(self, stream: AsyncStream) -> None:
        self._s = stream
        self.snapshot = Snapshot.of(stream.first)

    async def __aiter__(self) -> AsyncIterator[Event]:
        async for line in self._s:
            if line.get("status") == "tree_event" and line.get("event"):
                yield Event.of(line["event"])

    async def aclose(self) -> None:
        await self._s.aclose()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncTree:
    """A snapshot tree (see :class:`arbor.Tree`)."""

    def __init__(self, client: AsyncClient, tree_id: str, root_id: str) -> None:
        self.client, self.id = client, tree_id
        self.root = AsyncNode(self, root_id)

    @classmethod
    async def create(cls, base: str | os.PathLike[str], *, client: AsyncClient, backend: str | None = None,
                     budget: Budget | Mapping[str, int] | None = None, tree_id: str | None = None,
                     image: str | None = None, network: str | None = None) -> AsyncTree:
        return await client.create_tree(base, backend=backend, budget=budget, tree_id=tree_id,
                                        image=image, network=network)

    def node(self, node_id: str) -> AsyncNode:
        return self.root if node_id == self.root.id else AsyncNode(self, node_id)

    async def snapshot(self) -> Snapshot:
        return await self.client.snapshot(self.id)

    async def nodes(self) -> list[AsyncNode]:
        out = []
        for info in (await self.snapshot()).nodes:
            n = self.node(info.id)
            n._adopt(info)
            out.append(n)
        return out

    async def usage(self) -> Usage:
        return (await self.snapshot()).usage

    async def budget(self) -> Budget:
        return (await self.snapshot()).budget

    async def info(self) -> TreeInfo:
        for t in await self.client.trees():
            if t.id == self.id:
                return t
        raise NotFoundError(f"tree {self.id!r}: not held by the daemon", op="tree_list")

    async def auto_evict(self) -> list[AsyncNode]:
        r = await self.client.call("tree_auto_evict", tree_id=self.id)
        return [self.node(i) for i in r.get("evicted") or ()]

    async def watch(self) -> AsyncWatch:
        return await self.client.watch(self.id)

    def branch(self, label: str | None = None) -> contextlib.AbstractAsyncContextManager[AsyncNode]:
        return self.root.branch(label)

    async def drop(self) -> None:
        await self.client.call("tree_drop", tree_id=self.id)

    async def delete(self) -> None:
        await self.client.call("tree_delete", tree_id=self.id)

    def __repr__(self) -> str:
        return f"AsyncTree({self.id!r}, root={self.root.id!r})"


class AsyncNode:
    """One node (see :class:`arbor.Node`); every verb is a coroutine."""

    def __init__(self, tree: AsyncTree, node_id: str, *, label: str | None = None,
                 path: str | None = None) -> None:
        self.tree, self.id, self.label, self._path = tree, node_id, label, path
        self.info: NodeInfo | None = None
        self.last_fork_latency = 0.0
        self._files: AsyncFiles | None = None

    __slots__ = ("tree", "id", "label", "_path", "info", "last_fork_latency", "_files")

    @property
    def files(self) -> AsyncFiles:
        if self._files is None:
            self._files = AsyncFiles(self)
        return self._files

    def _adopt(self, info: NodeInfo) -> None:
        self.info, self._path, self.label = info, info.path, info.label

    @property
    def path(self) -> str | None:
        return self._path

    def __fspath__(self) -> str:
        if not self._path:
            raise ArborError(f"node {self.id} has no path (not live, or its backend has none)", "bad_state")
        return self._path

    async def _call(self, op: str) -> dict[str, Any]:
        return await self.tree.client._t.call(_verbs.node(op, self.tree.id, self.id))

    def _child(self, f: dict[str, Any]) -> AsyncNode:
        return AsyncNode(self.tree, f["node_id"], label=f.get("label") or None, path=f.get("path") or None)

    async def refresh(self) -> NodeInfo:
        info = (await self.tree.snapshot()).node(self.id)
        self._adopt(info)
        return info

    @overload
    async def fork(self, n: None = None, *, label: str | None = None) -> AsyncNode: ...
    @overload
    async def fork(self, n: int, *, label: None = None) -> list[AsyncNode]: ...
    @overload
    async def fork(self, n: None = None, *, labels: Sequence[str]) -> list[AsyncNode]: ...

    async def fork(self, n: int | None = None, *, label: str | None = None,
                   labels: Sequence[str] | None = None) -> AsyncNode | list[AsyncNode]:
        req, batch = _verbs.fork(self.tree.id, self.id, n, label, labels)
        r = await self.tree.client._t.call(req)
        self.last_fork_latency = int(r.get("latency_ns", 0)) / 1e9
        kids = [self._child(f) for f in _verbs.forks(r)]
        return kids if batch else kids[0]

    async def commit(self) -> list[AsyncNode]:
        r = await self._call("tree_commit")
        return [self.tree.node(i) for i in r.get("stale") or ()]

    async def abort(self) -> None:
        await self._call("tree_abort")

    async def rollback(self, label: str | None = None) -> AsyncNode:
        r = await self.tree.client._t.call(dict(_verbs.node("tree_rollback", self.tree.id, self.id), label=label))
        return self._child(_verbs.forks(r)[0])

    async def protect(self) -> None:
        await self._call("tree_protect")

    async def unprotect(self) -> None:
        await self._call("tree_unprotect")

    async def prune(self) -> None:
        await self._call("tree_prune")

    async def suspend(self) -> None:
        await self._call("tree_suspend")
        self._path = None

    async def resume(self) -> AsyncNode:
        self._path = (await self._call("tree_resume")).get("path") or None
        return self

    @contextlib.asynccontextmanager
    async def branch(self, label: str | None = None) -> AsyncIterator[AsyncNode]:
        """Fork a child; commit it when the block ends normally, abort it on an exception
        (cancellation included)."""
        child = await self.fork(label=label)
        try:
            yield child
        except BaseException:
            with contextlib.suppress(ArborError):
                await child.abort()
            raise
        try:
            await child.commit()
        except NotFoundError:
            pass  # the block committed or aborted it itself
        except StaleError:
            with contextlib.suppress(ArborError):
                await child.abort()  # lost to a sibling: nothing of it is kept
            raise

    async def exec(self, argv: Sequence[str] | str, *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, timeout: float | None = None,
                   stdin: bytes | str | None = None,
                   on_stdout: Callable[[bytes], Any] | None = None,
                   on_stderr: Callable[[bytes], Any] | None = None) -> ExecResult:
        col = _verbs.ExecCollector(on_stdout, on_stderr)
        req = _verbs.exec_req(self.tree.id, self.id, argv, cwd, env, timeout, stdin=stdin)
        async for _ in self._exec_lines(req, timeout, col):
            pass
        return col.done()

    def exec_stream(self, argv: Sequence[str] | str, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None, timeout: float | None = None,
                    stdin: bytes | str | None = None) -> AsyncExecStream:
        col = _verbs.ExecCollector()
        req = _verbs.exec_req(self.tree.id, self.id, argv, cwd, env, timeout, stdin=stdin)
        return AsyncExecStream(col, self._exec_lines(req, timeout, col))

    async def _exec_lines(self, req: dict[str, Any], timeout: float | None,
                          col: _verbs.ExecCollector) -> AsyncIterator[Output]:
        c = self.tree.client
        async with await c._t.stream(req, _verbs.exec_timeout(c.timeout, timeout)) as s:
            line: dict[str, Any] | None = s.first
            while line is not None:
                if (o := col.feed(line)) is not None:
                    yield o
                # The exit line ends it (the first line, for a process with no output):
                # the daemon sends nothing after it.
                line = await anext(s, None) if not col.ended else None

    async def spawn(self, argv: Sequence[str] | str, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None) -> AsyncProcess:
        r = await self.tree.client._t.call(_verbs.exec_req(self.tree.id, self.id, argv, cwd, env, None, True))
        return AsyncProcess(self, str(r.get("process_id", "")))

    async def processes(self) -> list[AsyncProcess]:
        r = await self.tree.client._t.call(_verbs.node("exec_list", self.tree.id, self.id))
        return [AsyncProcess(self, p.id, p) for p in _verbs.processes(r)]

    def __repr__(self) -> str:
        return f"AsyncNode({self.tree.id!r}, {self.id!r})"


class AsyncExecStream:
    """Output chunks of a running process (async); ``result`` once the iteration ended."""

    def __init__(self, col: _verbs.ExecCollector, it: AsyncIterator[Output]) -> None:
        self._col, self._it = col, it

    def __aiter__(self) -> AsyncIterator[Output]:
        return self._it

    @property
    def result(self) -> ExecResult:
        return self._col.done()


class AsyncProcess:
    """A background process of a node (see :class:`arbor.Process`)."""

    def __init__(self, node: AsyncNode, process_id: str, info: ProcessInfo | None = None) -> None:
        self.node, self.id, self.info = node, process_id, info

    async def kill(self) -> None:
        await self.node.tree.client._t.call(dict(_verbs.node("exec_kill", self.node.tree.id, self.node.id),
                                                 process_id=self.id))

    def logs(self, *, follow: bool = False) -> AsyncExecStream:
        n = self.node
        req = dict(_verbs.node("exec_logs", n.tree.id, n.id), process_id=self.id, follow=follow or None)
        col = _verbs.ExecCollector()
        return AsyncExecStream(col, n._exec_lines(req, None, col))

    def __repr__(self) -> str:
        return f"AsyncProcess({self.node.id!r}, {self.id!r})"


class AsyncFiles:
    """A node's files through the daemon (see :class:`arbor.Files`): reads and writes
    stream in chunks. ``write`` takes an async iterable of bytes too."""

    def __init__(self, node: AsyncNode) -> None:
        self._n = node

    async def _call(self, op: str, path: str, **kw: Any) -> dict[str, Any]:
        n = self._n
        return await n.tree.client._t.call(_verbs.file_req(op, n.tree.id, n.id, path, **kw))

    async def read(self, path: str) -> bytes:
        async with await self.read_chunks(path) as fs:
            return b"".join([c async for c in fs])

    async def read_chunks(self, path: str) -> AsyncFileStream:
        n = self._n
        return await n.tree.client._t.read_file(_verbs.file_req("file_read", n.tree.id, n.id, path))

    async def download(self, path: str, dest: str | os.PathLike[str] | IO[bytes]) -> FileInfo:
        """Copy the file into ``dest`` (see :meth:`arbor.Files.download`); the local writes
        are blocking, a chunk at a time."""
        async with await self.read_chunks(path) as fs:
            with _verbs.saving(dest) as write:
                async for chunk in fs:
                    write(chunk)
        return FileInfo.of(fs.info or {})

    async def write(self, path: str, data: _verbs.Data | AsyncIterable[bytes], *,
                    mode: int | None = None) -> FileInfo:
        n = self._n
        t = n.tree.client._t
        if not isinstance(data, AsyncIterable) and (inline := _verbs.small(data)) is not None:
            r = await t.call(_verbs.file_write(n.tree.id, n.id, path, mode, inline))
        else:
            body: Input = data if isinstance(data, AsyncIterable) else _verbs.chunks(data)
            r = await t.call(_verbs.file_write(n.tree.id, n.id, path, mode), input=body)
        return FileInfo.of(r.get("file") or {})

    async def upload(self, src: str | os.PathLike[str], path: str, *, mode: int | None = None) -> FileInfo:
        with open(src, "rb") as f:
            return await self.write(path, f, mode=mode)

    async def list(self, path: str = "") -> list[FileInfo]:
        return _verbs.file_list(await self._call("file_list", path))

    async def stat(self, path: str) -> FileInfo:
        return _verbs.file_stat(await self._call("file_stat", path))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._call("file_remove", path, recursive=recursive or None)

    async def mkdir(self, path: str, *, mode: int | None = None, parents: bool = False) -> FileInfo:
        return _verbs.file_stat(await self._call("file_mkdir", path, mode=mode, parents=parents or None))
