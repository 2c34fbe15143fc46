"""Blocking transports: the Unix socket (JSON lines) and HTTP (/v1), each with a
small pool of idle connections shared by threads.

``call`` returns the reply of one request, or raises the typed error of an
error reply; ``stream`` returns a :class:`Stream` over the lines of a
streaming op (``tree_watch``, ``exec``). A connection is never shared by two
calls at once; a pool left behind by ``os.fork`` is dropped in the child, not
closed (the parent still owns those descriptors).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import select
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

from . import _verbs, _wire
from .errors import ArborError, ConnectionLost, DaemonUnavailable, LimitError, Timeout, from_reply

#: Bound of one reply line (a tree_nodes of a very large tree), as the Go client's.
MAX_REPLY = 256 << 20
#: Idle connections kept per client.
MAX_IDLE = 16


def check(reply: dict[str, Any], op: str, http_status: int | None = None) -> dict[str, Any]:
    """Return an ok reply; raise the typed error of an error reply."""
    if reply.get("status") == "error":
        raise from_reply(reply, op=op, http_status=http_status)
    return reply


class _LineConn:
    """One socket connection with its own read buffer (so liveness can be checked).

    The socket stays in blocking mode, its timeouts set in the kernel (SO_RCVTIMEO,
    SO_SNDTIMEO; an expired one fails the call with EAGAIN) only when they change:
    a Python-level timeout would cost two fcntl calls and a poll per call, and
    would make the non-blocking liveness peek wait."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.timeout: float | None = None
        self._poll: select.poll | None = None

    def set_timeout(self, t: float | None) -> None:
        if t == self.timeout:
            return
        secs = 0.0 if t is None else max(t, 1e-6)
        tv = struct.pack("ll", int(secs), int((secs % 1) * 1e6))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self.timeout = t

    def readline(self) -> bytes:
        if not self.buf:  # the usual case: one reply, whole in one read
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the daemon closed the connection")
            if chunk.find(b"\n") == len(chunk) - 1:
                return chunk[:-1]
            self.buf += chunk
        seen = 0  # the buffer's bytes already searched for the newline
        while True:
            i = self.buf.find(b"\n", seen)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return line
            if len(self.buf) > MAX_REPLY:
                raise ConnectionLost(f"reply longer than {MAX_REPLY} bytes")
            seen = len(self.buf)
            # A long line (a file's chunk, a large tree): bigger reads, fewer calls.
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("the daemon closed the connection")
            self.buf += chunk

    def alive(self) -> bool:
        """Nothing has arrived since the last reply (the daemon closes idle connections
        with a line saying so, and at a restart)."""
        if self.buf:
            return False
        if self._poll is None:
            self._poll = select.poll()
            self._poll.register(self.sock, select.POLLIN)
        # Readable means an unasked-for line or the end of the stream; one poll(2)
        # with no wait (a failed non-blocking peek would cost an exception).
        return not self._poll.poll(0)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Stream:
    """The replies of a streaming op after its first one (``first``), as an iterator.

    Iteration ends when the daemon ends the stream; :meth:`close` (or leaving a
    ``with`` block) ends it from this side, from any thread.
    """

    def __init__(self, first: dict[str, Any], lines: Iterator[dict[str, Any]], closer: Any) -> None:
        self.first = first
        self._lines = lines
        self._closer = closer
        self._closed = False

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._closed:
            raise StopIteration
        try:
            return next(self._lines)
        except StopIteration:
            self.close()
            raise
        except (socket.timeout, BlockingIOError) as e:  # a stream that keeps its deadline
            self.close()
            raise Timeout(f"stream: nothing came within the call's timeout: {e}") from e
        except (OSError, EOFError, ValueError, http.client.HTTPException):
            # The daemon ended the stream (a shutdown), or close() did.
            self.close()
            raise StopIteration from None
        except Exception:
            if self._closed:  # http.client's reader torn down under it by close()
                raise StopIteration from None
            raise

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._closer()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileStream:
    """A file's bytes as they come (file_read), as an iterator of chunks; ``info`` (the
    file's description) is set once the last chunk came. Never holds the whole file."""

    def __init__(self, chunks: Callable[[FileStream], Iterator[bytes]], closer: Callable[[], None]) -> None:
        self.info: dict[str, Any] | None = None
        self._it = chunks(self)
        self._closer = closer
        self._closed = False

    def __iter__(self) -> FileStream:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._it)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._closer()

    def __enter__(self) -> FileStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Pool:
    """Idle connections, dropped (not closed) after a fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._inherited: list[Any] = []
        self._pid = os.getpid()
        self.closed = False

    def _after_fork(self) -> None:
        # In a forked child (one thread: no lock needed here) the connections are the
        # parent's: held (not closed, not collected) and never used; and the lock may
        # have been copied while another thread of the parent held it.
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._inherited, self._idle, self._pid = self._idle, [], os.getpid()

    def get(self) -> Any | None:
        self._after_fork()
        with self._lock:
            return self._idle.pop() if self._idle else None

    def put(self, c: Any, close: Any) -> None:
        self._after_fork()
        with self._lock:
            if not self.closed and len(self._idle) < MAX_IDLE:
                self._idle.append(c)
                return
        close(c)

    def drain(self) -> list[Any]:
        self._after_fork()
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
            return idle


class SocketTransport:
    """JSON lines over arbord's Unix socket."""

    name = "socket"

    def __init__(self, path: str, timeout: float | None = None) -> None:
        self.path = path
        self.timeout = timeout
        self._pool = _Pool()

    def _dial(self, timeout: float | None) -> _LineConn:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            s.close()
            raise DaemonUnavailable(f"no arbord answers at {self.path}: {e.strerror} "
                                    "(start it with `arbor daemon`, or any arbor command)") from e
        except socket.timeout as e:
            s.close()
            raise Timeout(f"connecting to {self.path}: timed out") from e
        except OSError as e:
            s.close()
            raise DaemonUnavailable(f"connecting to arbord at {self.path}: {e}") from e
        s.settimeout(None)
        return _LineConn(s)

    def _get(self, timeout: float | None) -> tuple[_LineConn, bool]:
        if self._pool.closed:
            raise ArborError("arbor client: closed", "closed")
        while (c := self._pool.get()) is not None:
            if c.alive():
                return c, True
            c.close()
        return self._dial(timeout), False

    def call(self, req: dict[str, Any], timeout: float | None = None,
             input: Iterable[bytes] | None = None) -> dict[str, Any]:
        """One request and its reply; ``input`` is data sent after the request as input
        lines (file_write), chunk by chunk, on a fresh connection (it cannot be sent twice)."""
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        line = _wire.encode_line(req)
        for attempt in (0, 1):
            c, reused = self._get(t) if input is None else (self._dial(t), False)
            try:
                c.set_timeout(t)
                c.sock.sendall(line)
                if input is not None:
                    for chunk in input:
                        c.sock.sendall(_verbs.input_line(chunk))
                    c.sock.sendall(_verbs.INPUT_EOF)
                reply = _wire.decode_line(c.readline())
            except (socket.timeout, BlockingIOError) as e:
                c.close()
                raise Timeout(f"{op}: no reply within {t}s", op=op) from e
            except (OSError, EOFError, ValueError) as e:
                c.close()
                if reused and attempt == 0 and op in _wire.READ_ONLY:
                    continue  # an idle connection the daemon closed: once more, fresh
                raise ConnectionLost(f"{op}: connection to arbord at {self.path} lost: {e}", op=op) from e
            if reused and attempt == 0 and reply.get("code") == LimitError.code:
                c.close()  # closed for idling as the request went out: not served
                continue
            self._pool.put(c, _LineConn.close)
            return check(reply, op)
        raise ConnectionLost(f"{op}: connection to arbord at {self.path} lost", op=op)

    def stream(self, req: dict[str, Any], timeout: float | None = None, *,
               keep_deadline: bool = False) -> Stream:
        """A streaming op: its first reply within the timeout, and each later one too with
        ``keep_deadline`` (a file's chunks; a watch or a process may pause for any time)."""
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        c = self._dial(t)
        try:
            c.set_timeout(t)
            c.sock.sendall(_wire.encode_line(req))
            first = check(_wire.decode_line(c.readline()), op)
        except (socket.timeout, BlockingIOError) as e:
            c.close()
            raise Timeout(f"{op}: no reply within {t}s", op=op) from e
        except (OSError, EOFError, ValueError) as e:
            c.close()
            raise ConnectionLost(f"{op}: connection to arbord lost: {e}", op=op) from e
        except BaseException:
            c.close()
            raise
        if not keep_deadline:
            c.set_timeout(None)

        def lines() -> Iterator[dict[str, Any]]:
            while True:
                yield _wire.decode_line(c.readline())

        def closer() -> None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        return Stream(first, lines(), closer)

    def read_file(self, req: dict[str, Any], timeout: float | None = None) -> FileStream:
        """file_read: its "file_data" lines' chunks, then the last line's."""
        s = self.stream(req, timeout, keep_deadline=True)

        def chunks(fs: FileStream) -> Iterator[bytes]:
            fl = _verbs.FileLines()
            line: dict[str, Any] | None = s.first
            while line is not None:
                if data := fl.feed(line):
                    yield data
                if fl.info is not None:
                    fs.info = fl.info
                    return
                line = next(s, None)
            raise ConnectionLost(f"{req['op']}: the stream ended before the file's end", op=req["op"])
        return FileStream(chunks, s.close)

    def close(self) -> None:
        for c in self._pool.drain():
            c.close()


def _continued(sock: socket.socket) -> bool:
    """After a request's head with "Expect: 100-continue": True once the server's interim
    "100 Continue" came (and was read), False if its final reply came instead (left unread
    for http.client: the request was refused before its body)."""
    head = sock.recv(12, socket.MSG_PEEK | socket.MSG_WAITALL)
    if not head.startswith(b"HTTP/1.1 100"):
        return False
    seen = b""
    while not seen.endswith(b"\r\n\r\n"):  # a few bytes, read one by one: never past them
        b = sock.recv(1)
        if not b:
            raise EOFError("the server closed the connection")
        seen += b
    return True


class HTTPTransport:
    """The /v1 REST face with a bearer token."""

    name = "http"

    def __init__(self, url: str, token: str | None, timeout: float | None = None) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"arbor: {url!r} is not an http:// URL")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        self._pool = _Pool()

    def _new(self, timeout: float | None) -> http.client.HTTPConnection:
        cls: type[http.client.HTTPConnection] = (
            http.client.HTTPSConnection if self._https else http.client.HTTPConnection)
        return cls(self._host, self._port, timeout=timeout)

    def _idle_conn(self) -> http.client.HTTPConnection | None:
        """An idle keep-alive connection the server has not closed (one poll(2) each)."""
        while (c := self._pool.get()) is not None:
            if c.sock is not None and not select.select([c.sock], [], [], 0)[0]:
                return c  # type: ignore[no-any-return]
            c.close()
        return None

    def _headers(self, body: bytes | None, accept: str) -> dict[str, str]:
        h = {"Accept": accept, "User-Agent": "arbor-python"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            h["Content-Type"] = "application/json"
        return h

    def _send(self, conn: http.client.HTTPConnection, req: dict[str, Any], timeout: float | None,
              accept: str, raw: bytes | Iterable[bytes] | None = None) -> http.client.HTTPResponse:
        method, path, body = _wire.http_route(req)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        headers = self._headers(data, accept)
        if isinstance(raw, bytes):  # a small file_write: its bytes as the body
            headers["Content-Type"] = "application/octet-stream"
            conn.request(method, self._prefix + path, body=raw, headers=headers)
        elif raw is not None:  # file_write: the file's bytes as a chunked body, once the server
            conn.putrequest(method, self._prefix + path)  # agreed (it refuses a bad one at once)
            for k, v in {**headers, **_wire.UPLOAD_HEADERS}.items():
                conn.putheader(k, v)
            conn.endheaders()
            if conn.sock is not None and _continued(conn.sock):
                for chunk in raw:
                    conn.send(_wire.http_chunk(chunk))
                conn.send(_wire.http_chunk(b""))
        else:
            conn.request(method, self._prefix + path, body=data, headers=headers)
        return conn.getresponse()

    def _fail(self, op: str, e: BaseException, t: float | None) -> ArborError:
        if isinstance(e, socket.timeout):
            return Timeout(f"{op}: no reply within {t}s", op=op)
        if isinstance(e, ConnectionRefusedError):
            return DaemonUnavailable(f"no arbord answers at {self.url}: {e.strerror}", op=op)
        return ConnectionLost(f"{op}: connection to arbord at {self.url} lost: {e}", op=op)

    @staticmethod
    def _reply(op: str, resp: http.client.HTTPResponse, data: bytes) -> dict[str, Any]:
        try:
            reply = _wire.decode_line(data)
        except ValueError:
            raise ArborError(f"{op}: HTTP {resp.status} with a body that is not JSON: {data[:200]!r}",
                             "internal", http_status=resp.status, op=op) from None
        return check(reply, op, resp.status)

    def call(self, req: dict[str, Any], timeout: float | None = None,
             input: Iterable[bytes] | None = None) -> dict[str, Any]:
        """One request and its reply; ``input`` is file_write's data, sent as the body in
        chunks on a fresh connection (it cannot be sent twice)."""
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        raw: bytes | Iterable[bytes] | None = input
        if input is None and op == "file_write":
            raw = base64.b64decode(req.get("data_b64") or "")
            if len(raw) > _wire.SMALL_BODY:
                raw = _verbs.chunks(raw)
        for attempt in (0, 1):
            conn = self._idle_conn() if raw is None or isinstance(raw, bytes) else None
            reused = conn is not None
            conn = conn or self._new(t)
            try:
                resp = self._send(conn, req, t, "application/json", raw)
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                # A keep-alive connection the server closed as the request went out:
                # repeated only where that is harmless (the verb may have been served).
                if reused and attempt == 0 and op in _wire.READ_ONLY and not isinstance(e, socket.timeout):
                    continue
                raise self._fail(op, e, t) from e
            if resp.will_close or not (raw is None or isinstance(raw, bytes)):
                conn.close()  # (a streamed upload's connection: its body may not have been sent)
            else:
                self._pool.put(conn, http.client.HTTPConnection.close)
            return self._reply(op, resp, data)
        raise ConnectionLost(f"{op}: connection to arbord at {self.url} lost", op=op)

    def stream(self, req: dict[str, Any], timeout: float | None = None) -> Stream:
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        conn = self._new(t)
        try:
            resp = self._send(conn, dict(req, stream=True), t, "text/event-stream, application/x-ndjson")
            ctype = resp.getheader("Content-Type") or ""
            if resp.status >= 300 or not ("event-stream" in ctype or "ndjson" in ctype):
                reply = self._reply(op, resp, resp.read())  # an error reply raises here
                conn.close()
                return Stream(reply, iter(()), lambda: None)
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._fail(op, e, t) from e
        except BaseException:
            conn.close()
            raise
        if conn.sock is not None:
            conn.sock.settimeout(None)
        sse = "event-stream" in ctype

        def lines() -> Iterator[dict[str, Any]]:
            parser = _wire.SSEParser()
            while True:
                raw = resp.readline(MAX_REPLY)
                if not raw:
                    return
                if not sse:
                    if raw.strip():
                        yield _wire.decode_line(raw)
                    continue
                ev = parser.feed(raw.decode())
                if ev is not None:
                    yield ev

        it = lines()
        try:
            first = check(next(it), op)
        except StopIteration:
            conn.close()
            raise ConnectionLost(f"{op}: the stream ended before its first reply", op=op) from None
        except (OSError, ValueError) as e:
            conn.close()
            raise self._fail(op, e, t) from e

        def closer() -> None:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            conn.close()
        return Stream(first, it, closer)

    def read_file(self, req: dict[str, Any], timeout: float | None = None) -> FileStream:
        """file_read: GET .../files/{path}, whose body is the file (described in headers)."""
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        conn = self._new(t)
        try:
            resp = self._send(conn, req, t, "application/octet-stream")
            if resp.status >= 300:
                self._reply(op, resp, resp.read())  # raises the error reply
                raise ArborError(f"{op}: HTTP {resp.status}", "internal", http_status=resp.status, op=op)
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._fail(op, e, t) from e
        except BaseException:
            conn.close()
            raise
        info = _verbs.file_info(str(req.get("path") or ""), {k.lower(): v for k, v in resp.getheaders()})

        def chunks(fs: FileStream) -> Iterator[bytes]:
            try:
                while data := resp.read1(1 << 20):
                    yield data
            except (OSError, http.client.HTTPException) as e:  # a transfer the daemon cut
                raise self._fail(op, e, t) from e
            fs.info = info
        return FileStream(chunks, conn.close)

    def close(self) -> None:
        for c in self._pool.drain():
            c.close()
