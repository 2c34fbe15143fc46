"""Each verb's request and how its reply is read, shared by the blocking and the
asyncio objects (whose methods are one line over these)."""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, Union

from .errors import ArborError, BadRequestError, from_reply
from .types import Budget, ExecResult, FileInfo, ImageBuild, ImageInfo, Output, ProcessInfo, wire_bytes

Req = dict[str, Any]


def create(base: str | os.PathLike[str], backend: str | None, budget: Budget | Mapping[str, int] | None,
           tree_id: str | None, image: str | None = None, network: str | None = None) -> Req:
    b = budget.wire() if isinstance(budget, Budget) else (dict(budget) if budget else None)
    return {"op": "tree_create", "base": os.path.abspath(os.fspath(base)), "backend": backend,
            "budget": b or None, "tree_id": tree_id, "image": image or None, "network": network or None}


def image_build(name: str, suite: str | None, variant: str | None, packages: Sequence[str] | None) -> Req:
    if isinstance(packages, str):  # one name, not its letters
        packages = [packages]
    return {"op": "image_build", "image": name, "suite": suite or None, "variant": variant or None,
            "packages": list(packages) if packages else None}


#: How long an image_build may wait for its first line: a build of inputs another build is
#: making waits for that one before it says anything (mmdebstrap takes about a minute).
IMAGE_FIRST_LINE = 3600.0


class ImageLines:
    """Reads the lines of an image_build stream: each ``image_progress`` line goes to the
    callback; the ``image_built`` line ends it (``result``)."""

    def __init__(self, on_progress: Callable[[str], Any] | None) -> None:
        self.cb = on_progress
        self.result: ImageBuild | None = None

    def feed(self, line: Req) -> bool:
        """Take one line; True once the build's reply came. An error line raises."""
        if line.get("status") == "error":  # the daemon's last line, in place of image_built
            raise from_reply(line, op="image_build")
        if line.get("status") == "image_progress":
            if self.cb is not None:
                self.cb(str(line.get("progress") or ""))
            return False
        if isinstance(line.get("image"), dict):
            self.result = ImageBuild(ImageInfo.of(line["image"]), bool(line.get("cached")))
            return True
        raise ArborError(f"image_build: unexpected reply {line.get('status')!r}", "internal", op="image_build")

    def done(self) -> ImageBuild:
        if self.result is None:
            raise ArborError("image_build: the stream ended before the build's end", "connection_lost",
                             op="image_build")
        return self.result


def images(reply: Req) -> list[ImageInfo]:
    return [ImageInfo.of(i) for i in reply.get("images") or ()]


def fork(tree: str, source: str, n: int | None, label: str | None,
         labels: Sequence[str] | None) -> tuple[Req, bool]:
    """The fork request and whether it is a batch (one fork_batch for n or labels)."""
    if labels is not None and (n is not None or label is not None):
        raise BadRequestError("fork: give n, label or labels, not two of them", op="tree_fork")
    if n is not None:
        if label is not None:
            raise BadRequestError("fork: give n or label, not both", op="tree_fork")
        if not isinstance(n, int) or n < 1:
            raise BadRequestError(f"fork: n must be a positive count, not {n!r}", op="tree_fork_batch")
        labels = [""] * n
    if labels is not None:
        return {"op": "tree_fork_batch", "tree_id": tree, "source_id": source,
                "labels": list(labels)}, True
    return {"op": "tree_fork", "tree_id": tree, "source_id": source, "label": label}, False


def forks(reply: Req) -> list[Req]:
    """The children a fork reply names."""
    out = list(reply.get("forks") or ())
    if not out and reply.get("node_id"):
        out = [{"node_id": reply["node_id"], "path": reply.get("path")}]
    if not out:
        raise ArborError(f"fork reply names no node (status {reply.get('status')!r})", "internal")
    return out


def node(op: str, tree: str, node_id: str) -> Req:
    return {"op": op, "tree_id": tree, "node_id": node_id}


def tree(op: str, tree_id: str | None) -> Req:
    return {"op": op, "tree_id": tree_id}


def exec_req(tree_id: str, node_id: str, argv: Sequence[str] | str, cwd: str | None,
             env: Mapping[str, str] | None, timeout: float | None, detach: bool = False,
             stdin: bytes | str | None = None) -> Req:
    if isinstance(argv, str):
        argv = ["/bin/sh", "-c", argv]
    if not argv:
        raise BadRequestError("exec: argv must not be empty", op="exec")
    if isinstance(stdin, str):
        stdin = stdin.encode()
    # tree_exec (api/api.go): env as KEY=VALUE strings, the timeout in ns, stdin in base64.
    return {"op": "tree_exec", "tree_id": tree_id, "node_id": node_id, "argv": [str(a) for a in argv],
            "cwd": cwd, "env": [f"{k}={v}" for k, v in env.items()] if env else None,
            "timeout_ns": int(timeout * 1e9) if timeout else None, "detach": detach or None,
            "stdin": base64.b64encode(stdin).decode() if stdin else None}


def exec_timeout(call_timeout: float | None, timeout: float | None) -> float | None:
    """The client's read deadline of an exec: the process's own timeout and a grace."""
    if timeout is None:
        return None  # output may pause as long as the process likes
    return timeout + (call_timeout or 30.0)


class ExecCollector:
    """Reads the lines of an exec stream: output chunks go to the callbacks and are
    collected; the exit line ends it."""

    def __init__(self, on_stdout: Any = None, on_stderr: Any = None) -> None:
        self.cb = {"stdout": on_stdout, "stderr": on_stderr}
        self.out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self.result: ExecResult | None = None
        self.process_id: str | None = None
        #: The stream's last line came (an exit, or exec_logs' end of a process still running).
        self.ended = False

    def feed(self, line: Req) -> Output | None:
        """Take one line; returns the output chunk it carried, if any. An error line (the
        daemon's last, in place of the exit) raises its typed error."""
        if line.get("status") == "error":
            raise from_reply(line, op=str(line.get("op") or "tree_exec"))
        if line.get("process_id"):
            self.process_id = str(line["process_id"])
        if line.get("status") == "exec_logs":
            self.ended = True
        # The daemon's tree_exec stream: {"status": "tree_exec_output", "output":
        # {"stream", "data" (base64)}} lines, then {"status": "tree_exec_exit",
        # "exit": {"exit_code", "signal", "duration_ns"}}.
        if isinstance(line.get("exit"), dict):
            self.result = ExecResult.of(line["exit"], b"".join(self.out["stdout"]), b"".join(self.out["stderr"]))
            self.ended = True
            return None
        if isinstance(line.get("output"), dict):
            o = line["output"]
            line = {"stream": o.get("stream"), "data_b64": o.get("data") or ""}
        if "exit_code" in line or line.get("status") in ("exec_exit", "exec_done") or "signal" in line:
            # The streaming form sent the output before; the collected form carries it here.
            carried = any(k in line for k in ("stdout", "stdout_b64", "stderr", "stderr_b64"))
            if carried and not (self.out["stdout"] or self.out["stderr"]):
                self.result = ExecResult.of(line)
            else:
                self.result = ExecResult.of(line, b"".join(self.out["stdout"]), b"".join(self.out["stderr"]))
            self.ended = True
            return None
        stream = line.get("stream")
        if stream in self.out:
            chunk = Output(stream, wire_bytes(line, "data"))
            self.out[stream].append(chunk.data)
            if self.cb[stream] is not None:
                self.cb[stream](chunk.data)
            return chunk
        return None

    def done(self, op: str = "exec") -> ExecResult:
        if self.result is None:
            raise ArborError(f"{op}: the stream ended before the process's exit", "connection_lost", op=op)
        return self.result


def file_req(op: str, tree_id: str, node_id: str, path: str, **kw: Any) -> Req:
    return {"op": op, "tree_id": tree_id, "node_id": node_id, "path": path, **kw}


#: The most data one input line or one file_read line carries (api.MaxInputChunk): its
#: base64 stays well under the daemon's 1 MiB line limit.
MAX_CHUNK = 512 << 10

#: What a file's new content may be given as: bytes, text (UTF-8), a binary file object
#: (read in chunks), or an iterable of byte strings.
Data = Union[bytes, bytearray, memoryview, str, IO[bytes], Iterable[bytes]]


def chunks(data: Data, size: int = MAX_CHUNK) -> Iterator[bytes]:
    """data as pieces of at most size bytes, read as they are needed (never whole)."""
    if isinstance(data, str):
        data = data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        mv = memoryview(data)
        for i in range(0, len(mv), size):
            yield bytes(mv[i:i + size])
        return
    read = getattr(data, "read", None)
    if read is not None:
        while b := read(size):
            yield bytes(b)
        return
    for piece in data:
        mv = memoryview(piece)
        for i in range(0, len(mv), size):
            yield bytes(mv[i:i + size])


def processes(reply: Req) -> list[ProcessInfo]:
    return [ProcessInfo.of(p) for p in reply.get("process_list") or ()]


def small(data: Data) -> bytes | None:
    """data itself when it fits in the request line (one round trip), else None."""
    if isinstance(data, str):
        b = data.encode()
        return b if len(b) <= MAX_CHUNK else None
    if isinstance(data, (bytes, bytearray, memoryview)) and len(data) <= MAX_CHUNK:
        return bytes(data)
    return None


def input_line(chunk: bytes) -> bytes:
    """One api.Input line carrying chunk (the socket face's file_write data)."""
    return b'{"data":"' + base64.b64encode(chunk) + b'"}\n'


#: The api.Input line that ends the data.
INPUT_EOF = b'{"eof":true}\n'


def file_write(tree_id: str, node_id: str, path: str, mode: int | None, inline: bytes | None = None) -> Req:
    """file_write with its data in the request (inline) or following it as input lines."""
    if inline is not None:
        return file_req("file_write", tree_id, node_id, path, data_b64=base64.b64encode(inline).decode(),
                        mode=mode)
    return file_req("file_write", tree_id, node_id, path, mode=mode, input=True)


class FileLines:
    """Reads file_read's reply lines: "file_data" chunks, then one "file_read" line with
    the last chunk and the file's description (``info``)."""

    def __init__(self) -> None:
        self.info: dict[str, Any] | None = None

    def feed(self, line: Req) -> bytes:
        if line.get("status") == "error":  # the daemon's last line, in place of the end
            raise from_reply(line, op="file_read")
        if line.get("status") == "file_read":
            self.info = line.get("file") or {}
        elif line.get("status") != "file_data":
            raise ArborError(f"file_read: unexpected reply {line.get('status')!r}", "internal", op="file_read")
        return wire_bytes(line, "data")


@contextlib.contextmanager
def saving(dest: str | os.PathLike[str] | IO[bytes]) -> Iterator[Callable[[bytes], Any]]:
    """A write function into a binary file object, or into a local path through a
    temporary file renamed over it only once the block ends without an error."""
    if not isinstance(dest, (str, os.PathLike)):
        yield dest.write
        return
    final = os.fspath(dest)
    tmp = f"{final}.arbor-{os.getpid()}-{id(dest):x}.part"
    try:
        with open(tmp, "wb") as f:
            yield f.write
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def file_info(path: str, headers: Mapping[str, str]) -> dict[str, Any]:
    """A file's description from the headers of GET .../files/{path} (the HTTP face)."""
    def num(h: str, base: int = 10) -> int:
        try:
            return int(headers.get(h, "") or "0", base)
        except ValueError:
            return 0
    return {"name": os.path.basename(path.rstrip("/")), "path": path, "type": "file",
            "size": num("x-arbor-file-size"), "mode": num("x-arbor-file-mode", 8),
            "mtime_unix_ns": num("x-arbor-file-mtime")}


def file_list(reply: Req) -> list[FileInfo]:
    return [FileInfo.of(e) for e in reply.get("entries") or reply.get("files") or ()]


def file_stat(reply: Req) -> FileInfo:
    return FileInfo.of(reply.get("file") or reply)
