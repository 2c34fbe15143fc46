"""The wire protocol without I/O: where each op goes over HTTP, how replies and
streams are read. Both transports (socket and HTTP) and both clients (sync and
asyncio) use these functions, so a verb's shape is written down once.

The socket face takes the request object as one JSON line (``op`` in,
``status`` out; api/api.go). The HTTP face serves the same verbs as /v1
resources (internal/httpapi/routes.go); :func:`http_route` maps a request to
its method, path and body exactly as the Go client does (client/http.go).

The files verbs (``file_*``) are served on every backend; exec and the background
processes (``tree_exec``, ``exec_*``) where the backend runs processes (jail, vm).
A daemon without them answers NotSupportedError (:func:`arbor.errors.from_reply`).
The image verbs (``image_build``, ``image_list``, ``image_rm``) are /v1/images;
image_build streams ``image_progress`` lines before its ``image_built`` reply.
file_read's reply and file_write's data stream in chunks: ``file_data`` lines and
input lines over the socket, a raw body over HTTP.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any
from urllib.parse import quote

from .errors import BadRequestError

#: Ops that only read: a dropped idle connection is retried once for them.
READ_ONLY = frozenset({"ping", "tree_nodes", "tree_list", "ws_list", "ws_diff", "ws_mounts",
                       "file_read", "file_list", "file_stat", "exec_list", "exec_logs",
                       "image_list"})

#: Ops whose socket reply is a stream of lines (ended by the daemon or by closing).
STREAMS = frozenset({"tree_watch", "tree_exec", "exec_logs", "file_read", "image_build"})

#: Ops whose HTTP body is the file's raw bytes (file_read's reply, file_write's request).
RAW = frozenset({"file_read", "file_write"})

#: A file_write body up to this size is sent whole; a larger one streams in chunks after
#: the server's "100 Continue", so that a refusal (a missing node, a bad path) comes back
#: as its reply rather than as a connection reset mid-body.
SMALL_BODY = 64 << 10

#: The head of a streamed file_write over HTTP.
UPLOAD_HEADERS = {"Content-Type": "application/octet-stream", "Transfer-Encoding": "chunked",
                  "Expect": "100-continue"}

#: Node verbs served as POST /v1/trees/{t}/nodes/{n}/{verb} with no body.
_NODE_VERBS = {
    "tree_commit": "commit", "tree_protect": "protect", "tree_unprotect": "unprotect",
    "tree_suspend": "suspend", "tree_resume": "resume", "tree_prune": "prune",
    "exec_kill": "exec/kill",
}

#: Ops served as tree resources: op -> (method, suffix after /v1/trees/{t}).
_TREE_VERBS = {
    "tree_nodes": ("GET", ""), "tree_delete": ("DELETE", ""), "tree_drop": ("POST", "/drop"),
    "tree_open": ("POST", "/open"), "tree_auto_evict": ("POST", "/evict"),
}


#: One encoder for every request: json.dumps with any option builds a new one per call.
_encode = json.JSONEncoder(separators=(",", ":")).encode


def encode_line(req: dict[str, Any]) -> bytes:
    """One request line: compact JSON with the fields that are set, and a newline."""
    return _encode({k: v for k, v in req.items() if v is not None}).encode() + b"\n"


def decode_line(line: bytes) -> dict[str, Any]:
    """One reply line as a dict (a line that is not a JSON object is a protocol error)."""
    v = json.loads(line)
    if not isinstance(v, dict):
        raise ValueError(f"reply is not a JSON object: {line[:80]!r}")
    return v


def _need(req: dict[str, Any], *keys: str) -> None:
    for k in keys:
        if not req.get(k):
            raise BadRequestError(f"{req['op']}: {k} is required", op=req["op"])


def http_route(req: dict[str, Any]) -> tuple[str, str, dict[str, Any] | None]:
    """The HTTP method, path (with query) and JSON body of a request."""
    op = req["op"]
    t = quote(str(req.get("tree_id") or ""), safe="")
    n = quote(str(req.get("node_id") or ""), safe="")
    node = f"/v1/trees/{t}/nodes/{n}"
    if op == "ping":
        return "GET", "/v1/version", None
    if op == "tree_list":
        return "GET", "/v1/trees", None
    if op == "tree_create":
        body = {k: req[k] for k in ("tree_id", "base", "backend", "budget", "image", "network") if req.get(k)}
        return "POST", "/v1/trees", body
    if op == "image_list":
        return "GET", "/v1/images", None
    if op == "image_build":  # streamed: image_progress lines, then image_built
        body = {k: req[k] for k in ("image", "suite", "variant", "packages") if req.get(k)}
        return "POST", "/v1/images" + ("?stream=ndjson" if req.get("stream") else ""), body
    if op == "image_rm":
        _need(req, "image")
        return "DELETE", "/v1/images/" + quote(str(req["image"]), safe=""), None
    if op == "tree_watch":
        if req.get("tree_id"):
            return "GET", f"/v1/trees/{t}/watch", None
        return "GET", "/v1/events", None
    if op in _TREE_VERBS:
        _need(req, "tree_id")
        method, suffix = _TREE_VERBS[op]
        return method, f"/v1/trees/{t}{suffix}", None
    if op in ("tree_fork", "tree_fork_batch"):
        _need(req, "tree_id", "source_id")
        src = quote(str(req["source_id"]), safe="")
        path = f"/v1/trees/{t}/nodes/{src}/fork"
        if op == "tree_fork":
            return "POST", path, {"label": req.get("label") or ""}
        return "POST", path, {"labels": list(req.get("labels") or [])}
    _need(req, "tree_id", "node_id")
    if op == "tree_rollback":
        return "POST", node + "/rollback", ({"label": req["label"]} if req.get("label") else None)
    if op == "tree_abort":
        return "DELETE", node, None
    if op in _NODE_VERBS:
        kill = {"process_id": req["process_id"]} if req.get("process_id") else None
        return "POST", f"{node}/{_NODE_VERBS[op]}", kill
    if op == "tree_exec":
        body = {k: req[k] for k in ("argv", "cwd", "env", "timeout_ns", "stdin", "detach") if req.get(k)}
        return "POST", node + "/exec" + ("?stream=ndjson" if req.get("stream") else ""), body
    if op == "exec_list":
        return "GET", node + "/exec", None
    if op == "exec_logs":
        q = "?process_id=" + quote(str(req.get("process_id") or ""), safe="")
        return "GET", node + "/exec/logs" + q + ("&follow=1" if req.get("follow") else ""), None
    if op.startswith("file_"):
        # An HTTP path cannot carry ".." (the server's router cleans it with a redirect),
        # so it is resolved here, as the socket face resolves it: never above the top.
        path = quote(posixpath.normpath("/" + str(req.get("path") or "")).lstrip("/"))
        files = f"{node}/files/{path}"
        if op == "file_read":
            return "GET", files, None
        if op == "file_stat":
            return "GET", files + "?stat=1", None
        if op == "file_list":
            return "GET", files + "?list=1", None
        if op == "file_remove":
            return "DELETE", files + ("?recursive=1" if req.get("recursive") else ""), None
        if op == "file_write":  # the body is the file's bytes, streamed by the transport
            return "PUT", files + (f"?mode=0{req['mode']:o}" if req.get("mode") else ""), None
        if op == "file_mkdir":
            body = {k: req[k] for k in ("mode", "parents") if req.get(k)}
            return "POST", files + "?mkdir=1", body or None
    raise BadRequestError(f"{op}: no HTTP route for this op", op=op)


class SSEParser:
    """Server-sent events, line by line: feed() returns an event's data (one JSON
    reply, as the socket face sends it) when a blank line ends the event."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> dict[str, Any] | None:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return decode_line(data.encode())
        if line.startswith(":"):
            return None  # a keepalive comment
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None


def http_request_bytes(method: str, host: str, path: str, token: str | None,
                       body: dict[str, Any] | None, *, stream: bool = False, chunked: bool = False) -> bytes:
    """A whole HTTP/1.1 request (for the asyncio client, which has no stdlib HTTP client);
    with chunked, only its head: a raw body of chunks follows (:func:`http_chunk`)."""
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "User-Agent: arbor-python",
             "Accept: " + ("text/event-stream, application/x-ndjson" if stream else "application/json")]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if chunked:
        lines += [f"{k}: {v}" for k, v in UPLOAD_HEADERS.items()]
    elif body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    elif method in ("POST", "PUT", "DELETE"):
        lines.append("Content-Length: 0")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def http_chunk(data: bytes) -> bytes:
    """One chunk of a chunked HTTP body (an empty one ends the body)."""
    return b"%x\r\n" % len(data) + data + b"\r\n"
