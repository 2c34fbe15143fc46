"""Every verb over both transports with the blocking client, and the errors, against a
real arbord (tests/daemon.py)."""

from __future__ import annotations

import os
import re
import socket
import tempfile
import threading
import unittest

from tests.daemon import REPO, D, read, setUpModule, tearDownModule  # noqa: F401

import arbor
from arbor import _verbs, _wire
from arbor.errors import from_reply




def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


class Verbs:
    """The scenarios, run once per transport by the subclasses."""

    transport = "socket"

    def setUp(self) -> None:
        self.c = D.client(self.transport)
        self.base = D.base({"a.txt": "base\n"})
        self.tree = self.c.create_tree(self.base)

    def tearDown(self) -> None:
        try:
            self.tree.delete()
        except arbor.NotFoundError:
            pass
        self.c.close()

    def test_transport_and_version(self) -> None:
        self.assertEqual(self.c.transport, self.transport)
        self.assertEqual(self.c.ping(), arbor.__version__)

    def test_create_list_and_get(self) -> None:
        infos = {t.id: t for t in self.c.trees()}
        self.assertIn(self.tree.id, infos)
        info = infos[self.tree.id]
        self.assertEqual((info.base, info.backend, info.root), (self.base, "dir", self.tree.root.id))
        self.assertEqual(info.budget, arbor.Budget(8, 8 << 30, 0, 8 << 30, 4096))
        again = self.c.tree(self.tree.id)
        self.assertEqual(again.root, self.tree.root)
        self.assertEqual(read(os.path.join(again.root.path, "a.txt")), "base\n")

    def test_create_with_budget_and_id(self) -> None:
        t = self.c.create_tree(D.base(), budget={"max_live_nodes": 3}, tree_id=f"b{self.transport}")
        try:
            self.assertEqual(t.id, f"b{self.transport}")
            self.assertEqual(t.budget().max_live_nodes, 3)
            with self.assertRaises(arbor.ExistsError):
                self.c.create_tree(D.base(), tree_id=t.id)
        finally:
            t.delete()

    def test_fork_one_n_and_labels(self) -> None:
        one = self.tree.root.fork(label="solo")
        self.assertIsInstance(one, arbor.Node)
        self.assertEqual(one.label, "solo")
        many = self.tree.root.fork(3)
        self.assertEqual(len(many), 3)
        self.assertGreater(self.tree.root.last_fork_latency, 0)
        named = self.tree.root.fork(labels=["x", "y"])
        self.assertEqual([n.label for n in named], ["x", "y"])
        ids = {n.id for n in [one, *many, *named]}
        self.assertEqual(len(ids), 6)
        snap = self.tree.snapshot()
        self.assertEqual(set(snap.node(self.tree.root.id).children), ids)
        self.assertEqual(snap.usage.live_nodes, 7)
        for n in many:  # snapshot isolation: a child's write is its own
            self.assertEqual(read(os.path.join(n.path, "a.txt")), "base\n")
        write(os.path.join(many[0].path, "a.txt"), "mine\n")
        self.assertEqual(read(os.path.join(many[1].path, "a.txt")), "base\n")
        with self.assertRaises(arbor.BadRequestError):
            self.tree.root.fork(0)
        with self.assertRaises(arbor.BadRequestError):
            self.tree.root.fork(labels=[])  # the daemon refuses an empty batch

    def test_commit_first_wins_and_stale(self) -> None:
        a, b, c = self.tree.root.fork(3)
        write(os.path.join(a.path, "a.txt"), "from a\n")
        write(os.path.join(b.path, "a.txt"), "from b\n")
        stale = a.commit()
        self.assertEqual({n.id for n in stale}, {b.id, c.id})
        self.assertEqual(read(os.path.join(self.base, "a.txt")), "from a\n")
        with self.assertRaises(arbor.StaleError) as cm:
            b.commit()
        self.assertEqual(cm.exception.code, "stale")
        if self.transport == "http":
            self.assertEqual(cm.exception.http_status, 409)
        self.assertEqual(b.refresh().state, "stale")
        b.abort()
        c.prune()
        self.assertEqual([n.id for n in self.tree.nodes()], [self.tree.root.id])

    def test_nested_commit(self) -> None:
        child = self.tree.root.fork()
        grandchild = child.fork()
        write(os.path.join(grandchild.path, "deep.txt"), "deep\n")
        grandchild.commit()
        self.assertFalse(os.path.exists(os.path.join(self.base, "deep.txt")))
        child.commit()
        self.assertEqual(read(os.path.join(self.base, "deep.txt")), "deep\n")

    def test_rollback_protect_prune(self) -> None:
        old = self.tree.root.fork()
        write(os.path.join(old.path, "v"), "1")
        newer = old.fork()
        write(os.path.join(newer.path, "v"), "2")
        back = old.rollback(label="again")
        self.assertEqual(read(os.path.join(back.path, "v")), "1")
        newer.protect()
        self.assertTrue(newer.refresh().protected)
        with self.assertRaises(arbor.ProtectedError):
            old.prune()  # a protected descendant
        newer.unprotect()
        old.prune()
        self.assertEqual({n.id for n in self.tree.nodes()}, {self.tree.root.id})

    def test_suspend_resume_and_auto_evict(self) -> None:
        t = self.c.create_tree(D.base({"f": "x"}), budget=arbor.Budget(max_live_nodes=3))
        try:
            a, b = t.root.fork(2)
            a.suspend()
            self.assertIsNone(a.path)
            self.assertEqual(a.refresh().state, "suspended")
            a.resume()
            self.assertEqual(read(os.path.join(a.path, "f")), "x")
            with self.assertRaises(arbor.BudgetError):
                t.root.fork(3)
            b.protect()
            self.assertEqual(t.auto_evict(), [])  # within budget: nothing to do
            self.assertEqual(t.usage().live_nodes, 3)
        finally:
            t.delete()

    def test_drop_and_open(self) -> None:
        kid = self.tree.root.fork()
        self.tree.drop()
        with self.assertRaises(arbor.NotFoundError):
            self.tree.snapshot()
        t = self.c.open_tree(self.tree.id)
        self.assertIn(kid.id, {n.id for n in t.nodes()})

    def test_branch_context_manager(self) -> None:
        with self.tree.branch() as b:
            write(os.path.join(b.path, "ok.txt"), "kept\n")
        self.assertEqual(read(os.path.join(self.base, "ok.txt")), "kept\n")
        with self.assertRaises(ZeroDivisionError):
            with self.tree.root.branch() as b:
                write(os.path.join(b.path, "bad.txt"), "dropped\n")
                1 / 0
        self.assertFalse(os.path.exists(os.path.join(self.base, "bad.txt")))
        self.assertEqual([n.id for n in self.tree.nodes()], [self.tree.root.id])
        with self.tree.branch() as b:  # a block that decided itself is left alone
            b.abort()
        with self.assertRaises(arbor.StaleError):  # lost to a sibling: raised, and aborted
            with self.tree.branch() as b:
                other = self.tree.root.fork()
                other.commit()
        self.assertEqual([n.id for n in self.tree.nodes()], [self.tree.root.id])
        self.assertFalse(os.path.exists(os.path.join(self.base, "nothing")))

    def test_errors(self) -> None:
        with self.assertRaises(arbor.NotFoundError):
            self.c.tree("no-such-tree")
        with self.assertRaises(arbor.NotFoundError):
            self.tree.node("n999").commit()
        with self.assertRaises(arbor.StateError) as cm:
            self.tree.root.commit()  # the root has no parent
        self.assertEqual(cm.exception.code, "bad_state")
        with self.assertRaises(arbor.BadRequestError):
            self.c.create_tree(os.path.join(self.base, "missing"))
        e = cm.exception
        self.assertIsInstance(e, arbor.ArborError)
        self.assertTrue(e.message)
        self.assertIn("[bad_state]", str(e))

    def test_watch(self) -> None:
        with self.tree.watch() as w:
            self.assertEqual(w.snapshot.root, self.tree.root.id)
            kid = self.tree.root.fork()
            kid.protect()
            kinds = []
            for ev in w:
                self.assertEqual(ev.tree_id, self.tree.id)
                kinds.append((ev.kind, ev.node_id))
                if ev.kind == "protect":
                    break
        self.assertEqual(kinds, [("fork", kid.id), ("protect", kid.id)])

    def test_watch_every_tree(self) -> None:
        other = self.c.create_tree(D.base())
        try:
            with self.c.watch() as w:
                other.root.fork()
                kid = self.tree.root.fork()
                seen = []
                for ev in w:
                    seen.append((ev.tree_id, ev.kind))
                    if (ev.tree_id, ev.node_id) == (self.tree.id, kid.id):  # ids are per tree
                        break
            self.assertEqual(seen, [(other.id, "fork"), (self.tree.id, "fork")])
        finally:
            other.delete()

    def test_watch_closed_from_another_thread(self) -> None:
        w = self.tree.watch()
        threading.Timer(0.2, w.close).start()
        self.assertEqual(list(w), [])

    def test_exec_not_supported_on_dir(self) -> None:
        """The dir backend runs no processes (its files are served: tests/test_files.py)."""
        kid = self.tree.root.fork()
        for call in (lambda: kid.exec(["true"]), lambda: kid.exec("echo hi", timeout=5),
                     lambda: list(kid.exec_stream(["true"])), lambda: kid.spawn(["sleep", "1"]),
                     lambda: kid.processes()):
            with self.assertRaises(arbor.NotSupportedError) as cm:
                call()
            self.assertEqual(cm.exception.code, "not_supported")
        self.assertEqual(read(os.path.join(kid.path, "a.txt")), "base\n")  # nothing was done

    def test_concurrent_calls_from_threads(self) -> None:
        kids = self.tree.root.fork(6)
        errs: list[BaseException] = []

        def work(n: arbor.Node) -> None:
            try:
                for _ in range(20):
                    n.refresh()
                n.abort()
            except BaseException as e:  # noqa: BLE001
                errs.append(e)
        ts = [threading.Thread(target=work, args=(k,)) for k in kids]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errs, [])
        self.assertEqual(self.tree.usage().live_nodes, 1)


class SocketVerbs(Verbs, unittest.TestCase):
    transport = "socket"


class HTTPVerbs(Verbs, unittest.TestCase):
    transport = "http"


class Endpoints(unittest.TestCase):
    """Finding the daemon, and the failures that are not replies."""

    def test_environment(self) -> None:
        old = {k: os.environ.get(k) for k in ("ARBOR_HOME", "ARBOR_URL", "ARBOR_TOKEN")}
        try:
            os.environ["ARBOR_HOME"] = D.home
            os.environ.pop("ARBOR_URL", None)
            os.environ.pop("ARBOR_TOKEN", None)
            with arbor.Client() as c:
                self.assertEqual((c.transport, c.endpoint.socket), ("socket", D.socket))
                self.assertEqual(c.ping(), arbor.__version__)
            os.environ["ARBOR_URL"] = D.url  # the token from HOME/http.token
            with arbor.Client() as c:
                self.assertEqual((c.transport, c.endpoint.token), ("http", D.token))
                self.assertEqual(c.ping(), arbor.__version__)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_configured_socket(self) -> None:
        with tempfile.TemporaryDirectory() as h:
            write(os.path.join(h, "arbord.toml"), 'socket = "/run/x/arbord.sock"\n')
            self.assertEqual(arbor._config.socket_path(h), "/run/x/arbord.sock")
            self.assertEqual(arbor._config.socket_path(os.path.join(h, "none")),
                             os.path.join(h, "none", "arbord.sock"))

    def test_wrong_token(self) -> None:
        with self.assertRaises(arbor.AuthError) as cm:
            arbor.Client(url=D.url, token="wrong").ping()
        self.assertEqual(cm.exception.http_status, 401)

    def test_no_daemon(self) -> None:
        with self.assertRaises(arbor.DaemonUnavailable):
            arbor.Client(os.path.join(D.tmp, "nothing.sock")).ping()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # bound, not listening: refused
            with self.assertRaises(arbor.DaemonUnavailable):
                arbor.Client(url=f"http://127.0.0.1:{port}", token="t").ping()

    def _server(self, behaviour: str) -> tuple[str, threading.Thread, socket.socket]:
        """A socket that accepts and then never answers, or drops the connection."""
        path = os.path.join(D.tmp, f"{behaviour}.sock")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(path)
        srv.listen()

        def serve() -> None:
            conn, _ = srv.accept()
            conn.recv(4096)
            if behaviour == "drop":
                conn.close()
            else:
                threading.Event().wait(3)
                conn.close()
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        return path, t, srv

    def test_timeout_and_dropped_connection(self) -> None:
        path, t, srv = self._server("silent")
        with srv:
            with self.assertRaises(arbor.Timeout) as cm:
                arbor.Client(path, timeout=0.3).ping()
            self.assertIsInstance(cm.exception, TimeoutError)
        path, t, srv = self._server("drop")
        with srv:
            with self.assertRaises(arbor.ConnectionLost):
                arbor.Client(path).call("tree_commit", tree_id="t", node_id="n")

    def test_daemon_closed_idle_connection_is_redialled(self) -> None:
        with D.client("socket") as c:
            c.ping()
            for conn in c._t._pool._idle:  # as the daemon's idle timeout or a restart would
                conn.sock.shutdown(socket.SHUT_RDWR)
            self.assertEqual(c.ping(), arbor.__version__)

    def test_server_closed_keepalive_connection_is_not_used(self) -> None:
        base = D.base()
        with D.client("http") as c:
            t = c.create_tree(base)
            try:
                kid = t.root.fork()
                for conn in c._t._pool._idle:  # as the server's idle timeout would
                    conn.sock.shutdown(socket.SHUT_RDWR)
                kid.commit()  # a verb that is not repeated on a failure: it must go out on a fresh one
            finally:
                t.delete()


class WireErrors(unittest.TestCase):
    """The error table, and what a daemon without a verb answers."""

    def test_every_go_code_has_its_class(self) -> None:
        # The Go error table (api/errors.go; api/api.go before it moved).
        src = ""
        for name in ("errors.go", "api.go"):
            if os.path.exists(os.path.join(REPO, "api", name)):
                with open(os.path.join(REPO, "api", name)) as f:
                    src += f.read()
        go = re.findall(r'^\s*Code\w+\s*=\s*"(\w+)"', src, re.M)
        self.assertGreater(len(go), 10)
        for code in go:
            e = from_reply({"status": "error", "code": code, "message": "m"})
            self.assertEqual(e.code, code)
            self.assertIs(type(e), arbor.errors.CODES[code], code)
        self.assertIsInstance(from_reply({"code": "not_supported", "message": "m"}), arbor.NotSupportedError)
        self.assertIs(type(from_reply({"code": "from_the_future", "message": "m"})), arbor.ArborError)

    def test_older_daemon_reads_as_not_supported(self) -> None:
        # The replies of today's daemon to an op it does not know (socket and HTTP).
        for reply in ({"code": "bad_request", "message": 'unknown op "exec": bad request'},
                      {"code": "bad_request", "message": 'invalid request: json: unknown field "argv": bad request'},
                      {"code": "not_found", "message": "no route POST /v1/trees/t/nodes/n/exec: not found"}):
            self.assertIsInstance(from_reply(reply, op="exec"), arbor.NotSupportedError)
            # ... but for an op the daemon has, such a reply is what it says
            self.assertNotIsInstance(from_reply(reply, op="tree_fork"), arbor.NotSupportedError)
        self.assertIsInstance(from_reply({"code": "not_found", "message": 'commit "n9": no such node'},
                                         op="file_read"), arbor.NotFoundError)

    def test_raw_unknown_op(self) -> None:
        with D.client("socket") as c, self.assertRaises(arbor.BadRequestError) as cm:
            c.call("no_such_op")
        self.assertIn("unknown op", cm.exception.message)

    def test_http_routes_match_the_go_client(self) -> None:
        # The daemon's own OpenAPI document (checked against the Go verb table by
        # the Go tests) has every route the SDK sends.
        import json as _json
        import urllib.request
        r = urllib.request.Request(D.url + "/v1/openapi.json", headers={"Authorization": "Bearer " + D.token})
        with urllib.request.urlopen(r, timeout=10) as resp:
            paths = _json.load(resp)["paths"]
        for req in ({"op": "tree_list"}, {"op": "tree_create", "base": "/b"},
                    {"op": "tree_nodes", "tree_id": "t"}, {"op": "tree_delete", "tree_id": "t"},
                    {"op": "tree_drop", "tree_id": "t"}, {"op": "tree_open", "tree_id": "t"},
                    {"op": "tree_auto_evict", "tree_id": "t"}, {"op": "tree_watch", "tree_id": "t"},
                    {"op": "tree_fork", "tree_id": "t", "source_id": "n"},
                    {"op": "tree_rollback", "tree_id": "t", "node_id": "n"},
                    {"op": "tree_abort", "tree_id": "t", "node_id": "n"}, {"op": "ping"},
                    *({"op": op, "tree_id": "t", "node_id": "n", "path": "d/f"} for op in
                      ("file_read", "file_write", "file_list", "file_stat", "file_remove", "file_mkdir")),
                    {"op": "tree_exec", "tree_id": "t", "node_id": "n", "argv": ["true"]},
                    {"op": "exec_list", "tree_id": "t", "node_id": "n"},
                    {"op": "exec_kill", "tree_id": "t", "node_id": "n", "process_id": "p1"},
                    {"op": "exec_logs", "tree_id": "t", "node_id": "n", "process_id": "p1"},
                    {"op": "image_list"}, {"op": "image_build", "image": "i", "stream": True},
                    {"op": "image_rm", "image": "i"}):
            method, path, _ = _wire.http_route(req)
            pattern = re.sub(r"/t(?=/|$)", "/{tree}", path.split("?")[0]).replace("/nodes/n", "/nodes/{node}")
            pattern = pattern.replace("/files/d/f", "/files/{path...}").replace("/images/i", "/images/{image}")
            self.assertIn(pattern, paths, req)
            self.assertIn(method.lower(), paths[pattern], req)


class ExecWire(unittest.TestCase):
    """Reading exec replies into an ExecResult, without a daemon: the forms a real one sends
    on jail are in tests/test_jail.py; these add the collected and signalled shapes."""

    def test_streaming_form(self) -> None:
        seen: list[bytes] = []
        col = _verbs.ExecCollector(on_stdout=seen.append)
        lines = [{"status": "exec_started", "process_id": "p1"},
                 {"status": "exec_output", "stream": "stdout", "data": "hello "},
                 {"status": "exec_output", "stream": "stderr", "data_b64": "AAE="},
                 {"status": "exec_output", "stream": "stdout", "data": "world"},
                 {"status": "exec_exit", "exit_code": 3, "duration_ns": 1_500_000_000}]
        outs = [col.feed(line) for line in lines]
        self.assertEqual([o.stream for o in outs if o], ["stdout", "stderr", "stdout"])
        r = col.done()
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.duration, r.signal),
                         (3, b"hello world", b"\x00\x01", 1.5, None))
        self.assertEqual(r["exit_code"], 3)
        self.assertFalse(r.ok)
        self.assertEqual(seen, [b"hello ", b"world"])
        self.assertEqual(col.process_id, "p1")

    def test_collected_form_and_signal(self) -> None:
        col = _verbs.ExecCollector()
        col.feed({"status": "ok", "exit_code": 0, "stdout": "out", "stderr": "", "duration_ns": 10})
        self.assertEqual((col.done().stdout, col.done().ok), (b"out", True))
        col = _verbs.ExecCollector()
        col.feed({"status": "exec_exit", "exit_code": -1, "signal": "KILL"})
        self.assertEqual((col.done().exit_code, col.done().signal), (None, "KILL"))
        with self.assertRaises(arbor.ArborError):
            _verbs.ExecCollector().done()  # the stream ended before the exit line

    def test_daemon_stream(self) -> None:
        # The Go daemon's tree_exec lines (api.ExecOutput's data is base64).
        import base64
        col = _verbs.ExecCollector()
        for line in ({"status": "tree_exec_output", "output": {"stream": "stdout", "data": base64.b64encode(b"hi\n").decode()}},
                     {"status": "tree_exec_output", "output": {"stream": "stderr", "data": base64.b64encode(b"\x00e").decode()}},
                     {"status": "tree_exec_exit", "exit": {"exit_code": 3, "duration_ns": 2_000_000_000}}):
            col.feed(line)
        r = col.done()
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.duration), (3, b"hi\n", b"\x00e", 2.0))
        col = _verbs.ExecCollector()
        col.feed({"status": "tree_exec_exit", "exit": {"exit_code": -1, "signal": "KILL", "duration_ns": 1}})
        self.assertEqual((col.done().exit_code, col.done().signal), (None, "KILL"))

    def test_requests(self) -> None:
        req = _verbs.exec_req("t", "n", "echo hi", "/w", {"K": "V"}, 2.5)
        self.assertEqual(req["argv"], ["/bin/sh", "-c", "echo hi"])
        self.assertEqual(req["op"], "tree_exec")
        self.assertEqual((req["timeout_ns"], req["env"], req["cwd"]), (2_500_000_000, ["K=V"], "/w"))
        self.assertEqual(_wire.http_route(dict(req, stream=True))[:2],
                         ("POST", "/v1/trees/t/nodes/n/exec?stream=ndjson"))
        w = _verbs.file_write("t", "n", "d/f.txt", 0o600, b"\x00x")
        self.assertEqual((w["data_b64"], w["mode"], w.get("input")), ("AHg=", 0o600, None))
        # over HTTP the data is the raw body (the transport streams it), the mode in the query
        self.assertEqual(_wire.http_route(w), ("PUT", "/v1/trees/t/nodes/n/files/d/f.txt?mode=0600", None))
        self.assertTrue(_verbs.file_write("t", "n", "f", None)["input"])
        self.assertEqual(_wire.http_route(_verbs.file_req("file_read", "t", "n", "a/../../b c"))[1],
                         "/v1/trees/t/nodes/n/files/b%20c")
        self.assertEqual(b"".join(_verbs.input_line(b"\x00x") for _ in range(2)) + _verbs.INPUT_EOF,
                         b'{"data":"AHg="}\n{"data":"AHg="}\n{"eof":true}\n')
        self.assertEqual([len(c) for c in _verbs.chunks(b"x" * (_verbs.MAX_CHUNK + 1))], [_verbs.MAX_CHUNK, 1])
        with self.assertRaises(arbor.BadRequestError):
            _verbs.exec_req("t", "n", [], None, None, None)


if __name__ == "__main__":
    unittest.main()
