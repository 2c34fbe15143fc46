"""asyncio transports: the same two faces as _transport. The socket face is an
asyncio.Protocol that splits the bytes into lines itself (the client's hot path,
see _LineConn); HTTP runs on asyncio streams.

The standard library has no asyncio HTTP client, so HTTP/1.1 is spoken here
directly, as much of it as arbord's face uses: a JSON request with
Content-Length, a reply framed by Content-Length or chunked (the event
streams), keep-alive connections reused from a small pool.
"""

from __future__ import annotations

import asyncio
import base64
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any, Generic, TypeVar, Union
from urllib.parse import urlsplit

from . import _verbs, _wire
from ._transport import MAX_IDLE, MAX_REPLY, check
from .errors import ArborError, ConnectionLost, DaemonUnavailable, LimitError, Timeout

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]

#: Bytes of unread stream lines above which a connection stops reading (a slow consumer of
#: a fast exec's output), and below which it reads again.
_HIGH, _LOW = 1 << 20, 1 << 18


class _Expired(Exception):
    """A connection's call outlived its deadline (the watchdog closed the connection)."""


class _LineConn(asyncio.Protocol):
    """One socket connection as lines: ``data_received`` splits the bytes into a queue,
    :meth:`readline` takes the next line or waits for one.

    This is the asyncio client's hot path, so it does the least it can per call. A call's
    deadline is one number (:meth:`arm`), watched by a single timer per connection that is
    re-armed only when it fires: a per-call ``asyncio.timeout`` or ``call_at`` handle cost
    more than the rest of the round trip's client side. Writes go straight to the transport;
    a writer waits only when the transport paused it (a large request)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._t: asyncio.Transport | None = None
        self._buf = bytearray()  # an incomplete line
        self._lines: deque[bytes] = deque()
        self._size = 0  # bytes in _lines and _buf
        self._waiter: asyncio.Future[None] | None = None
        self._drainer: asyncio.Future[None] | None = None
        self._exc: BaseException | None = None  # why the connection ended (EOFError at its end)
        self._paused_reading = False
        self._deadline: float | None = None  # of the call in flight (None: no call, or no limit)
        self._timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._t = transport

    def data_received(self, data: bytes) -> None:
        self._size += len(data)
        if not self._buf and data.endswith(b"\n"):
            lines = data.split(b"\n")  # one reply, usually: [line, b""]
            lines.pop()
            self._lines.extend(lines)
        else:
            self._buf += data
            if b"\n" not in data:
                if len(self._buf) > MAX_REPLY:
                    self._end(ConnectionLost(f"reply longer than {MAX_REPLY} bytes"))
                return
            parts = self._buf.split(b"\n")
            self._buf = parts.pop()
            self._lines.extend(bytes(p) for p in parts)
        if self._size > _HIGH and not self._paused_reading and self._t is not None:
            self._paused_reading = True
            self._t.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self._exc is None:
            self._exc = exc or EOFError("the daemon closed the connection")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()
        if self._drainer is not None and not self._drainer.done():
            self._drainer.set_result(None)

    def pause_writing(self) -> None:
        if self._drainer is None or self._drainer.done():
            self._drainer = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._drainer is not None and not self._drainer.done():
            self._drainer.set_result(None)

    # the client's side

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    def _end(self, exc: BaseException) -> None:
        """Fail whoever waits with exc and close the connection."""
        if self._exc is None:
            self._exc = exc
        self.close()
        self._wake()

    def arm(self, timeout: float | None) -> None:
        """Start a call that must be answered within timeout seconds (None: no limit)."""
        if timeout is None:
            self._deadline = None
            return
        self._deadline = d = self._loop.time() + timeout
        if self._timer is None or self._timer.when() > d:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_at(d, self._watch)

    def disarm(self) -> None:
        self._deadline = None

    def _watch(self) -> None:
        self._timer = None
        d = self._deadline
        if d is None:
            return  # no call in flight: the next one arms again
        if self._loop.time() >= d:
            self._end(_Expired())
        else:
            self._timer = self._loop.call_at(d, self._watch)

    async def send(self, data: bytes) -> None:
        if self._exc is not None:
            raise self._exc
        assert self._t is not None
        self._t.write(data)
        if self._drainer is not None and not self._drainer.done():
            await self._drainer
            if self._exc is not None:
                raise self._exc

    async def readline(self) -> bytes:
        while not self._lines:
            if self._exc is not None:
                raise self._exc
            self._waiter = w = self._loop.create_future()
            try:
                await w
            finally:
                if self._waiter is w:
                    self._waiter = None
        if isinstance(self._exc, _Expired):
            raise self._exc  # the deadline passed before the caller took the reply
        line = self._lines.popleft()
        self._size -= len(line) + 1
        if self._paused_reading and self._size < _LOW and self._t is not None and self._exc is None:
            self._paused_reading = False
            self._t.resume_reading()
        return line

    def usable(self) -> bool:
        """Open, and nothing unasked-for arrived (the daemon closes an idle connection with
        a line saying so)."""
        return self._exc is None and not self._lines and not self._buf

    def close(self) -> None:
        if self._exc is None:
            self._exc = EOFError("closed")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._t is not None:
            self._t.close()


class _HTTPConn:
    """One HTTP connection (the stdlib's asyncio streams)."""

    def __init__(self, c: _Conn) -> None:
        self.r, self.w = c

    def usable(self) -> bool:
        return not self.r.at_eof() and not self.w.is_closing()

    def close(self) -> None:
        self.w.close()


class AsyncStream:
    """The replies of a streaming op after its first one (``first``), as an async iterator."""

    def __init__(self, first: dict[str, Any], lines: AsyncIterator[dict[str, Any]],
                 conn: _LineConn | _HTTPConn | None) -> None:
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
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError, ConnectionLost):
            await self.aclose()
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Close from synchronous code too (a finally, a callback)."""
        if not self._closed:
            self._closed = True
            if self._conn is not None:
                self._conn.close()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncFileStream:
    """A file's bytes as they come (file_read), as an async iterator of chunks; ``info``
    (the file's description) is set once the last chunk came."""

    def __init__(self, chunks: Callable[[AsyncFileStream], AsyncIterator[bytes]],
                 closer: Callable[[], None]) -> None:
        self.info: dict[str, Any] | None = None
        self._it = chunks(self)
        self._closer = closer
        self._closed = False

    def __aiter__(self) -> AsyncFileStream:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._it.__anext__()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._closer()

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> AsyncFileStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


#: What file_write's data may be given as to a transport: chunks, sync or async.
Input = Union[Iterable[bytes], AsyncIterable[bytes]]


async def _each(input: Input) -> AsyncIterator[bytes]:
    if isinstance(input, AsyncIterable):
        async for chunk in input:
            yield chunk
    else:
        for chunk in input:
            yield chunk


_C = TypeVar("_C", _LineConn, _HTTPConn)


class _Pool(Generic[_C]):
    """Idle connections (one event loop's: a client is used from one loop)."""

    def __init__(self) -> None:
        self.idle: list[_C] = []
        self.closed = False

    def get(self) -> _C | None:
        while self.idle:
            c = self.idle.pop()
            if c.usable():
                return c
            c.close()
        return None

    def put(self, c: _C) -> None:
        if self.closed or len(self.idle) >= MAX_IDLE or not c.usable():
            c.close()
        else:
            self.idle.append(c)

    def drain(self) -> None:
        self.closed = True
        for c in self.idle:
            c.close()
        self.idle = []


async def _within(aw: Any, t: float | None, op: str) -> Any:
    """Await aw within t seconds. asyncio.timeout (3.11) where there is one: wait_for
    runs the awaitable as a task of its own."""
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
        self._pool: _Pool[_LineConn] = _Pool()

    async def _dial(self, t: float | None, op: str) -> _LineConn:
        loop = asyncio.get_running_loop()
        try:
            _, c = await _within(loop.create_unix_connection(lambda: _LineConn(loop), self.path), t, op)
            assert isinstance(c, _LineConn)
            return c
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise DaemonUnavailable(f"no arbord answers at {self.path}: {e.strerror}", op=op) from e
        except OSError as e:
            raise DaemonUnavailable(f"connecting to arbord at {self.path}: {e}", op=op) from e

    def _timeout(self, op: str, t: float | None) -> Timeout:
        return Timeout(f"{op}: no reply within {t}s", op=op)

    async def call(self, req: dict[str, Any], timeout: float | None = None,
                   input: Input | None = None) -> dict[str, Any]:
        """One request and its reply; ``input`` is data sent after the request as input
        lines (file_write), chunk by chunk, on a fresh connection (it cannot be sent twice)."""
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        if self._pool.closed:
            raise ArborError("arbor client: closed", "closed")
        line = _wire.encode_line(req)
        for attempt in (0, 1):
            c = self._pool.get() if input is None else None
            reused = c is not None
            c = c or await self._dial(t, op)
            try:
                c.arm(t)
                await c.send(line)
                if input is not None:
                    async for chunk in _each(input):
                        c.arm(t)  # each chunk within the timeout, not the whole file
                        await c.send(_verbs.input_line(chunk))
                    await c.send(_verbs.INPUT_EOF)
                reply = _wire.decode_line(await c.readline())
                c.disarm()
            except _Expired as e:
                raise self._timeout(op, t) from e
            except (OSError, EOFError, ValueError, ConnectionLost) as e:
                c.close()
                if reused and attempt == 0 and op in _wire.READ_ONLY:
                    continue
                raise ConnectionLost(f"{op}: connection to arbord at {self.path} lost: {e}", op=op) from e
            except BaseException:  # cancelled mid-call: the connection's state is unknown
                c.close()
                raise
            if reused and attempt == 0 and reply.get("code") == LimitError.code:
                c.close()
                continue
            self._pool.put(c)
            return check(reply, op)
        raise ConnectionLost(f"{op}: connection to arbord at {self.path} lost", op=op)

    async def stream(self, req: dict[str, Any], timeout: float | None = None) -> AsyncStream:
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        c = await self._dial(t, op)
        try:
            c.arm(t)
            await c.send(_wire.encode_line(req))
            first = check(_wire.decode_line(await c.readline()), op)
            c.disarm()  # the lines after the first come when they come
        except _Expired as e:
            raise self._timeout(op, t) from e
        except (OSError, EOFError, ValueError, ConnectionLost) as e:
            c.close()
            raise ConnectionLost(f"{op}: connection to arbord lost: {e}", op=op) from e
        except BaseException:
            c.close()
            raise

        async def lines() -> AsyncIterator[dict[str, Any]]:
            while True:
                yield _wire.decode_line(await c.readline())
        return AsyncStream(first, lines(), c)

    async def read_file(self, req: dict[str, Any], timeout: float | None = None) -> AsyncFileStream:
        """file_read: its "file_data" lines' chunks, then the last line's."""
        t = self.timeout if timeout is None else timeout
        s = await self.stream(req, t)

        async def chunks(fs: AsyncFileStream) -> AsyncIterator[bytes]:
            fl = _verbs.FileLines()
            line: dict[str, Any] | None = s.first
            while line is not None:
                if data := fl.feed(line):
                    yield data
                if fl.info is not None:
                    fs.info = fl.info
                    return
                if isinstance(s._conn, _LineConn):
                    s._conn.arm(t)  # each chunk within the timeout
                try:
                    line = await anext(s, None)
                except _Expired as e:
                    raise self._timeout(req["op"], t) from e
            raise ConnectionLost(f"{req['op']}: the stream ended before the file's end", op=req["op"])
        return AsyncFileStream(chunks, s.close)

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
        self._pool: _Pool[_HTTPConn] = _Pool()

    async def _dial(self, t: float | None, op: str) -> _HTTPConn:
        try:
            c: _Conn = await _within(asyncio.open_connection(self._host, self._port, limit=MAX_REPLY), t, op)
            return _HTTPConn(c)
        except ConnectionRefusedError as e:
            raise DaemonUnavailable(f"no arbord answers at {self.url}: {e.strerror}", op=op) from e
        except OSError as e:
            raise DaemonUnavailable(f"connecting to arbord at {self.url}: {e}", op=op) from e

    def _request(self, req: dict[str, Any], stream: bool, chunked: bool = False) -> bytes:
        method, path, body = _wire.http_route(dict(req, stream=True) if stream else req)
        return _wire.http_request_bytes(method, self._hosthdr, self._prefix + path, self.token, body,
                                        stream=stream, chunked=chunked)

    @staticmethod
    def _reply(op: str, status: int, data: bytes) -> dict[str, Any]:
        try:
            reply = _wire.decode_line(data)
        except ValueError:
            raise ArborError(f"{op}: HTTP {status} with a body that is not JSON: {data[:200]!r}",
                             "internal", http_status=status, op=op) from None
        return check(reply, op, status)

    async def _exchange(self, c: _HTTPConn, data: bytes) -> tuple[int, dict[str, str], bytes]:
        c.w.write(data)
        await c.w.drain()
        status, headers = await _read_head(c.r)
        return status, headers, await _body(c.r, headers)

    async def _upload(self, c: _HTTPConn, head: bytes, input: Input, t: float | None,
                      op: str) -> tuple[int, dict[str, str], bytes]:
        """A request with a chunked raw body (file_write), sent once the server answered
        "100 Continue" (a refusal comes instead, as the reply), each chunk within t."""
        c.w.write(head)
        status, headers = await _within(_read_head(c.r), t, op)
        if status == 100:
            async for chunk in _each(input):
                c.w.write(_wire.http_chunk(chunk))
                await _within(c.w.drain(), t, op)
            c.w.write(_wire.http_chunk(b""))
            status, headers = await _within(_read_head(c.r), t, op)
        else:
            headers["connection"] = "close"  # the body was not sent: the connection is done
        return status, headers, await _within(_body(c.r, headers), t, op)

    async def call(self, req: dict[str, Any], timeout: float | None = None,
                   input: Input | None = None) -> dict[str, Any]:
        """One request and its reply; ``input`` is file_write's data, sent as the body in
        chunks on a fresh connection (it cannot be sent twice)."""
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        if input is None and op == "file_write":
            input = _verbs.chunks(base64.b64decode(req.get("data_b64") or ""))
        data = self._request(req, False, chunked=input is not None)
        for attempt in (0, 1):
            c = self._pool.get() if input is None else None
            reused = c is not None
            c = c or await self._dial(t, op)
            try:
                if input is not None:
                    status, headers, body = await self._upload(c, data, input, t, op)
                else:
                    status, headers, body = await _within(self._exchange(c, data), t, op)
            except Timeout:
                c.close()
                raise
            except (OSError, EOFError, ValueError, asyncio.IncompleteReadError) as e:
                c.close()
                if reused and attempt == 0 and op in _wire.READ_ONLY:
                    continue  # a keep-alive connection the server had closed (repeat only reads)
                raise ConnectionLost(f"{op}: connection to arbord at {self.url} lost: {e}", op=op) from e
            except BaseException:
                c.close()
                raise
            if headers.get("connection", "").lower() == "close":
                c.close()
            else:
                self._pool.put(c)
            return self._reply(op, status, body)
        raise ConnectionLost(f"{op}: connection to arbord at {self.url} lost", op=op)

    async def stream(self, req: dict[str, Any], timeout: float | None = None) -> AsyncStream:
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        c = await self._dial(t, op)
        try:
            c.w.write(self._request(req, True))
            await c.w.drain()
            status, headers = await _within(_read_head(c.r), t, op)
            ctype = headers.get("content-type", "")
            if status >= 300 or not ("event-stream" in ctype or "ndjson" in ctype):
                reply = self._reply(op, status, await _within(_body(c.r, headers), t, op))
                c.close()
                return AsyncStream(reply, _empty(), None)
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError) as e:
            c.close()
            raise ConnectionLost(f"{op}: connection to arbord at {self.url} lost: {e}", op=op) from e
        except BaseException:
            c.close()
            raise
        sse = "event-stream" in ctype

        async def lines() -> AsyncIterator[dict[str, Any]]:
            parser, buf = _wire.SSEParser(), b""
            async for chunk in _chunks(c.r, headers):
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
            c.close()
            raise ConnectionLost(f"{op}: the stream ended before its first reply", op=op) from None
        except BaseException:
            c.close()
            raise
        return AsyncStream(first, it, c)

    async def read_file(self, req: dict[str, Any], timeout: float | None = None) -> AsyncFileStream:
        """file_read: GET .../files/{path}, whose body is the file (described in headers)."""
        op = req["op"]
        t = self.timeout if timeout is None else timeout
        c = await self._dial(t, op)
        try:
            c.w.write(self._request(req, False))
            await c.w.drain()
            status, headers = await _within(_read_head(c.r), t, op)
            if status >= 300:
                self._reply(op, status, await _within(_body(c.r, headers), t, op))
                raise ArborError(f"{op}: HTTP {status}", "internal", http_status=status, op=op)
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError) as e:
            c.close()
            raise ConnectionLost(f"{op}: connection to arbord at {self.url} lost: {e}", op=op) from e
        except BaseException:
            c.close()
            raise
        info = _verbs.file_info(str(req.get("path") or ""), headers)

        async def chunks(fs: AsyncFileStream) -> AsyncIterator[bytes]:
            body = _chunks(c.r, headers)
            try:
                while (data := await _within(anext(body, None), t, op)) is not None:
                    yield data
            except (OSError, EOFError, ValueError, asyncio.IncompleteReadError) as e:
                raise ConnectionLost(f"{op}: the transfer was cut: {e}", op=op) from e
            fs.info = info
        return AsyncFileStream(chunks, c.close)

    async def close(self) -> None:
        self._pool.drain()


async def _empty() -> AsyncIterator[dict[str, Any]]:
    return
    yield  # an async generator with nothing in it
