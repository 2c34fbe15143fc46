"""The values the verbs return, as frozen dataclasses read from the wire's JSON
(api/api.go's Node, Tree, Usage, Budget, Fork, Event)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


@dataclass(frozen=True)
class Budget:
    """A tree's limits; 0 means the daemon's default (8 live nodes, 8 GiB RAM, no disk limit;
    on a jail tree each node's memory at most the tree's RAM and 4096 tasks)."""

    max_live_nodes: int = 0
    max_live_ram_bytes: int = 0
    max_disk_bytes: int = 0
    max_node_ram_bytes: int = 0
    max_node_pids: int = 0

    def wire(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v}

    @classmethod
    def of(cls, d: dict[str, Any] | None) -> Budget:
        d = d or {}
        return cls(int(d.get("max_live_nodes", 0)), int(d.get("max_live_ram_bytes", 0)),
                   int(d.get("max_disk_bytes", 0)), int(d.get("max_node_ram_bytes", 0)),
                   int(d.get("max_node_pids", 0)))


@dataclass(frozen=True)
class Usage:
    """What a tree holds."""

    live_nodes: int = 0
    total_nodes: int = 0
    live_ram_bytes: int = 0
    disk_bytes: int = 0

    @classmethod
    def of(cls, d: dict[str, Any] | None) -> Usage:
        d = d or {}
        return cls(int(d.get("live_nodes", 0)), int(d.get("total_nodes", 0)),
                   int(d.get("live_ram_bytes", 0)), int(d.get("disk_bytes", 0)))


@dataclass(frozen=True)
class NodeInfo:
    """One node as tree_nodes reports it. ``state`` is live, suspended or stale; ``path``
    is where its files are on the host (None unless live)."""

    id: str
    parent: str | None
    children: tuple[str, ...]
    state: str
    label: str | None
    protected: bool
    created_at_ns: int
    last_active_at_ns: int
    ram_bytes: int
    disk_bytes: int
    path: str | None

    @classmethod
    def of(cls, d: dict[str, Any]) -> NodeInfo:
        return cls(str(d["id"]), _opt_str(d.get("parent")), tuple(d.get("children") or ()),
                   str(d.get("state", "")), _opt_str(d.get("label")), bool(d.get("protected")),
                   int(d.get("created_at_unix_ns", 0)), int(d.get("last_active_at_unix_ns", 0)),
                   int(d.get("ram_bytes", 0)), int(d.get("disk_bytes", 0)), _opt_str(d.get("path")))


@dataclass(frozen=True)
class TreeInfo:
    """One tree as tree_list reports it."""

    id: str
    base: str
    backend: str
    root: str
    usage: Usage
    budget: Budget
    #: The image a jail tree's sandboxes run on (None: the host's root) and their network
    #: (None: "none", loopback only).
    image: str | None = None
    network: str | None = None

    @classmethod
    def of(cls, d: dict[str, Any]) -> TreeInfo:
        return cls(str(d["tree_id"]), str(d.get("base", "")), str(d.get("backend", "")),
                   str(d.get("root", "")), Usage.of(d.get("usage")), Budget.of(d.get("budget")),
                   _opt_str(d.get("image")), _opt_str(d.get("network")))


@dataclass(frozen=True)
class ImageInfo:
    """A root filesystem image built from Debian packages (api/api.go's Image): ``id`` is the
    hash of its inputs (several names may share one)."""

    name: str
    id: str
    suite: str
    variant: str
    packages: tuple[str, ...]
    mirror: str
    hook_id: str | None
    built_at_ns: int
    size_bytes: int

    @classmethod
    def of(cls, d: dict[str, Any]) -> ImageInfo:
        return cls(str(d.get("name", "")), str(d.get("id", "")), str(d.get("suite", "")),
                   str(d.get("variant", "")), tuple(d.get("packages") or ()), str(d.get("mirror", "")),
                   _opt_str(d.get("hook_id")), int(d.get("built_at_unix_ns", 0)), int(d.get("size_bytes", 0)))


@dataclass(frozen=True)
class ImageBuild:
    """What :meth:`arbor.Client.build_image` returns: the image, and whether it was cached
    (built before from the same inputs, so nothing ran)."""

    image: ImageInfo
    cached: bool


@dataclass(frozen=True)
class Snapshot:
    """A tree's nodes with its usage and budget (tree_nodes, and the first reply of a watch)."""

    tree_id: str
    root: str
    nodes: tuple[NodeInfo, ...]
    usage: Usage
    budget: Budget

    @classmethod
    def of(cls, d: dict[str, Any]) -> Snapshot:
        return cls(str(d.get("tree_id", "")), str(d.get("root", "")),
                   tuple(NodeInfo.of(n) for n in d.get("nodes") or ()),
                   Usage.of(d.get("usage")), Budget.of(d.get("budget")))

    def node(self, node_id: str) -> NodeInfo:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)


@dataclass(frozen=True)
class Event:
    """One change in a tree, as tree_watch streams it. ``kind`` is fork, commit, abort,
    protect, unprotect, suspend, resume, prune, evict, stale, drop, delete or create."""

    seq: int
    kind: str
    tree_id: str
    node_id: str | None
    time_ns: int

    @classmethod
    def of(cls, d: dict[str, Any]) -> Event:
        return cls(int(d.get("seq", 0)), str(d.get("kind", "")), str(d.get("tree_id", "")),
                   _opt_str(d.get("node_id")), int(d.get("time_unix_ns", 0)))


@dataclass(frozen=True)
class ExecResult:
    """What a finished process left: its exit code (None if a signal ended it, named in
    ``signal``), its output, and how long it ran. ``oom_killed``: the kernel killed a
    process of its node for the node's memory limit while it ran."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    duration: float
    signal: str | None = None
    oom_killed: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def __getitem__(self, key: str) -> Any:  # result["exit_code"], as the issue writes it
        return getattr(self, key)

    @classmethod
    def of(cls, d: dict[str, Any], stdout: bytes | None = None, stderr: bytes | None = None) -> ExecResult:
        code = d.get("exit_code")
        return cls(int(code) if code is not None and not d.get("signal") else None,
                   stdout if stdout is not None else wire_bytes(d, "stdout"),
                   stderr if stderr is not None else wire_bytes(d, "stderr"),
                   int(d.get("duration_ns", 0)) / 1e9, _opt_str(d.get("signal")),
                   bool(d.get("oom_killed")))


@dataclass(frozen=True)
class ProcessInfo:
    """A background process of a node, as exec_list reports it: ``exit`` once it ended
    (its output is in :meth:`arbor.Process.logs`)."""

    id: str
    pid: int
    argv: tuple[str, ...]
    started_ns: int
    exit: ExecResult | None

    @classmethod
    def of(cls, d: dict[str, Any]) -> ProcessInfo:
        x = d.get("exit")
        return cls(str(d.get("process_id", "")), int(d.get("pid", 0)), tuple(d.get("argv") or ()),
                   int(d.get("started_unix_ns", 0)), ExecResult.of(x, b"", b"") if isinstance(x, dict) else None)


@dataclass(frozen=True)
class Output:
    """One chunk of a running process's output (``stream`` is stdout or stderr)."""

    stream: str
    data: bytes


@dataclass(frozen=True)
class FileInfo:
    """A file on a node, as file_stat and file_list report it."""

    name: str
    size: int = 0
    mode: int = 0
    is_dir: bool = False
    mtime_ns: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    #: file, dir, symlink or other.
    type: str = ""
    #: A symlink's target, as written.
    link: str | None = None

    @classmethod
    def of(cls, d: dict[str, Any]) -> FileInfo:
        return cls(str(d.get("name") or d.get("path") or ""), int(d.get("size", 0)),
                   int(d.get("mode", 0)), bool(d.get("is_dir") or d.get("dir") or d.get("type") == "dir"),
                   int(d.get("mtime_unix_ns", 0)), d, str(d.get("type") or ""), _opt_str(d.get("link")))


def wire_bytes(d: dict[str, Any], key: str) -> bytes:
    """Bytes carried as ``key`` (text) or ``key_b64`` (base64, for binary data)."""
    if d.get(key + "_b64"):
        return base64.b64decode(d[key + "_b64"])
    v = d.get(key)
    return v.encode() if isinstance(v, str) else b""
