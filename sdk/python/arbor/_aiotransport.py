"""asyncio transports: the same two faces as _transport, on asyncio streams.

The standard library has no asyncio HTTP client, so HTTP/1.1 is spoken here
directly, as much of it as arbord's face uses: a JSON request with
Content-Length, a reply framed by Content-Length or chunked (the event
streams), keep-alive connections reused from a small pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from . import _wire
from ._transport import MAX_IDLE, MAX_REPLY, check
from .errors import ArborError, ConnectionLost, DaemonUnavailable, LimitError, Timeout

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _close(c: _Conn) -> None:
    c[1].close()


def _usable(c: _Conn) -> bool:
    return not c[0].at_eof() and not c[1].is_closing()


class AsyncStream:
    """The replies of a streaming op after its first one (``first``), as an async iterator."""

    def __init__(self, first: dict[str, Any], lines: AsyncIterator[dict[str, Any]], conn: _Conn | None) -> None:
        self.first = first
        self._lines = lines
        self._conn = conn
        self._closed = False

    def __aiter__(self) -> AsyncStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._closed:
            raise StopAsyncIteration
        try:
            return await self._lines.__anext__()
        except StopAsyncIteration:
            await self.aclose()
            raise
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError):
            await self.aclose()
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            if self._conn is not None:
                _close(self._conn)

    def close(self) -> None:
        """Close from synchronous code (a finally, a callback)."""
        if not self._closed:
            self._closed = True
            if self._conn is not None:
                _close(self._conn)

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Pool:
    def __init__(self) -> None:
        self.idle: list[_Conn] = []
        self.closed = False

    def get(self) -> _Conn | None:
        while self.idle:
            c = self.idle.pop()
            if _usable(c):
                return c
            _close(c)
        return None

    def put(self, c: _Conn) -> None:
        if self.closed or len(self.idle) >= MAX_IDLE or not _usable(c):
            _close(c)
        else:
            self.idle.append(c)

    def drain(self) -> None:
        self.closed = True
        for c in self.idle:
            _close(c)
        self.idle = []


async def _within(aw: Any, t: float | None, op: str) -> Any:
    """Await aw within t seconds. asyncio.timeout (3.11) where there is one: wait_for
    runs the awaitable as a task of its own, which costs more than the round trip."""
    if t is None:
        return await aw
    try:
        if hasattr(asyncio, "timeout"):
            async with asyncio.timeout(t):
                return await aw
        return await asyncio.wait_for(aw, t)
    except (asyncio.TimeoutError, TimeoutError) as e:
        if isinstance(e, Timeout):
            raise
        raise Timeout(f"{op}: no reply within {t}s", op=op) from e


class AsyncSocketTransport:
    name = "socket"

    def __init__(self, path: str, timeout: float | None = None) -> None:
        self.path, self.timeout = path, timeout
        self._pool = _Pool()

    async def _dial(self, t: float | None, op: str) -> _Conn:
        try:
            c: _Conn = await _within(asyncio.open_unix_connection(self.path, limit=MAX_REPLY), t, op)
            return c
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise DaemonUnavailable(f"no arbord answers at {self.path}: {e.strerror}", op=op) from e
        except OSError as e:
            raise DaemonUnavailable(f"connecting to arbord at {self.path}: {e}", op=op) from e

    async def _roundtrip(self, c: _Conn, line: bytes) -> dict[str, Any]:
        c[1].write(line)
        await c[1].drain()
        raw = await c[0].readline()
        if not raw.endswith(b"\n"):
            raise EOFError("the daemon closed the connection")
        return _wire.decode_line(raw)

    async def call(self, req: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        if self._pool.closed:
            raise ArborError("arbor client: closed", "closed")
        line = _wire.encode_line(req)
        for attempt in (0, 1):
            c = self._pool.get()
            reused = c is not None
            c = c or await self._dial(t, op)
            try:
                reply = await _within(self._roundtrip(c, line), t, op)
            except Timeout:
                _close(c)
                raise
            except (OSError, EOFError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                _close(c)
                if reused and attempt == 0 and op in _wire.READ_ONLY:
                    continue
                raise ConnectionLost(f"{op}: connection to arbord at {self.path} lost: {e}", op=op) from e
            except BaseException:  # cancelled mid-call: the connection's state is unknown
                _close(c)
                raise
            if reused and attempt == 0 and reply.get("code") == LimitError.code:
                _close(c)
                continue
            self._pool.put(c)
            return check(reply, op)
        raise ConnectionLost(f"{op}: connection to arbord at {self.path} lost", op=op)

    async def stream(self, req: dict[str, Any], timeout: float | None = None) -> AsyncStream:
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        c = await self._dial(t, op)
        try:
            first = check(await _within(self._roundtrip(c, _wire.encode_line(req)), t, op), op)
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError) as e:
            _close(c)
            raise ConnectionLost(f"{op}: connection to arbord lost: {e}", op=op) from e
        except BaseException:
            _close(c)
            raise

        async def lines() -> AsyncIterator[dict[str, Any]]:
            while True:
                raw = await c[0].readline()
                if not raw:
                    return
                yield _wire.decode_line(raw)
        return AsyncStream(first, lines(), c)

    async def close(self) -> None:
        self._pool.drain()


async def _read_head(r: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status_line = await r.readline()
    if not status_line:
        raise EOFError("the server closed the connection")
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"not an HTTP reply: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    while True:
        h = await r.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


async def _chunks(r: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    if "chunked" in headers.get("transfer-encoding", ""):
        while True:
            size = int((await r.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await r.readline()
                return
            yield await r.readexactly(size)
            await r.readline()
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if n:
            yield await r.readexactly(n)
    else:
        while b := await r.read(65536):
            yield b


async def _body(r: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    parts = [b async for b in _chunks(r, headers)]
    return b"".join(parts)


class AsyncHTTPTransport:
    name = "http"

    def __init__(self, url: str, token: str | None, timeout: float | None = None) -> None:
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"arbor.aio: {url!r} is not an http:// URL")
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout
        self._host, self._port = u.hostname, u.port or 80
        self._hosthdr = u.netloc
        self._prefix = u.path.rstrip("/")
        self._pool = _Pool()

    async def _dial(self, t: float | None, op: str) -> _Conn:
        try:
            c: _Conn = await _within(asyncio.open_connection(self._host, self._port, limit=MAX_REPLY), t, op)
            return c
        except ConnectionRefusedError as e:
            raise DaemonUnavailable(f"no arbord answers at {self.url}: {e.strerror}", op=op) from e
        except OSError as e:
            raise DaemonUnavailable(f"connecting to arbord at {self.url}: {e}", op=op) from e

    def _request(self, req: dict[str, Any], stream: bool) -> bytes:
        method, path, body = _wire.http_route(dict(req, stream=True) if stream else req)
        return _wire.http_request_bytes(method, self._hosthdr, self._prefix + path, self.token, body,
                                        stream=stream)

    @staticmethod
    def _reply(op: str, status: int, data: bytes) -> dict[str, Any]:
        try:
            reply = _wire.decode_line(data)
        except ValueError:
            raise ArborError(f"{op}: HTTP {status} with a body that is not JSON: {data[:200]!r}",
                             "internal", http_status=status, op=op) from None
        return check(reply, op, status)

    async def _exchange(self, c: _Conn, data: bytes) -> tuple[int, dict[str, str], bytes]:
        c[1].write(data)
        await c[1].drain()
        status, headers = await _read_head(c[0])
        return status, headers, await _body(c[0], headers)

    async def call(self, req: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        data = self._request(req, False)
        for attempt in (0, 1):
            c = self._pool.get()
            reused = c is not None
            c = c or await self._dial(t, op)
            try:
                status, headers, body = await _within(self._exchange(c, data), t, op)
            except Timeout:
                _close(c)
                raise
            except (OSError, EOFError, ValueError, asyncio.IncompleteReadError) as e:
                _close(c)
                if reused and attempt == 0 and op in _wire.READ_ONLY:
                    continue  # a keep-alive connection the server had closed (repeat only reads)
                raise ConnectionLost(f"{op}: connection to arbord at {self.url} lost: {e}", op=op) from e
            except BaseException:
                _close(c)
                raise
            if headers.get("connection", "").lower() == "close":
                _close(c)
            else:
                self._pool.put(c)
            return self._reply(op, status, body)
        raise ConnectionLost(f"{op}: connection to arbord at {self.url} lost", op=op)

    async def stream(self, req: dict[str, Any], timeout: float | None = None) -> AsyncStream:
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        c = await self._dial(t, op)
        try:
            c[1].write(self._request(req, True))
            await c[1].drain()
            status, headers = await _within(_read_head(c[0]), t, op)
            ctype = headers.get("content-type", "")
            if status >= 300 or not ("event-stream" in ctype or "ndjson" in ctype):
                reply = self._reply(op, status, await _within(_body(c[0], headers), t, op))
                _close(c)
                return AsyncStream(reply, _empty(), None)
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError) as e:
            _close(c)
            raise ConnectionLost(f"{op}: connection to arbord at {self.url} lost: {e}", op=op) from e
        except BaseException:
            _close(c)
            raise
        sse = "event-stream" in ctype

        async def lines() -> AsyncIterator[dict[str, Any]]:
            parser, buf = _wire.SSEParser(), b""
            async for chunk in _chunks(c[0], headers):
                buf += chunk
                *complete, buf = buf.split(b"\n")
                for raw in complete:
                    if not sse:
                        if raw.strip():
                            yield _wire.decode_line(raw)
                    elif (ev := parser.feed(raw.decode())) is not None:
                        yield ev

        it = lines()
        try:
            first = check(await _within(it.__anext__(), t, op), op)
        except StopAsyncIteration:
            _close(c)
            raise ConnectionLost(f"{op}: the stream ended before its first reply", op=op) from None
        except BaseException:
            _close(c)
            raise
        return AsyncStream(first, it, c)

    async def close(self) -> None:
        self._pool.drain()


async def _empty() -> AsyncIterator[dict[str, Any]]:
    return
    yield  # an async generator with nothing in it
