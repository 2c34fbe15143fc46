"""The seven exploration patterns, with BranchContext's names and call shapes.

Every pattern is a callable class: configure it, then call it on a node (or a
tree, meaning its root): ``Speculate([fix_a, fix_b])(tree.root)``. Each attempt
runs in its own forked node (one ``fork_batch`` per group), attempts run in
parallel, and the result is an :class:`Outcome`.

A candidate is called with an :class:`Attempt`, which is path-like (it is the
node's directory on the dir backend, so BranchContext code that takes ``path``
works as is) and carries the node, its index, a ``cancelled`` event and
:meth:`Attempt.run` to start processes that die with the attempt. A candidate
succeeds unless it raises or returns False; returning ``(ok, score)`` gives a
score as well. A candidate may be ``async def``: it runs on an event loop of its own
in its worker; ``await pattern.arun(tree)`` runs a pattern from asyncio code.

Killing an attempt (a timeout, a cancellation, or a sibling that won) kills
every process it started through :meth:`Attempt.run`, and aborts its node, which
on a sandbox backend kills every process of the node through the backend. With
``runner="thread"`` (the default) the candidate's own Python code runs in a
thread and is told through ``attempt.cancelled``: a thread cannot be killed.
With ``runner="process"`` each attempt is a forked child process in its own
session, killed whole (results must pickle).

Commit is first-commit-wins at the daemon: in Speculate and Cascaded the first
successful attempt commits its node into the parent itself, and a later
success loses with StaleError and is aborted.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import pickle
import queue
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .client import Node, Tree
from .errors import ArborError, StaleError
from .types import ExecResult

__all__ = ["Attempt", "Result", "Outcome", "Speculate", "BestOfN", "Reflexion", "TreeOfThoughts",
           "BeamSearch", "Tournament", "Cascaded"]

#: How long a killed attempt's worker is waited for before it is left behind.
KILL_GRACE = 2.0


class Attempt(os.PathLike):  # type: ignore[type-arg]
    """One attempt: a forked node, what the candidate is called with."""

    def __init__(self, node: Node, index: int, backend: str, *, number: int = 0,
                 feedback: Any = None) -> None:
        self.node = node
        self.index = index
        self.backend = backend
        #: Reflexion's retry number; Cascaded's wave.
        self.number = number
        #: Reflexion's critique of the last try; Cascaded's list of earlier errors.
        self.feedback = feedback
        #: Set when the attempt is killed (a timeout, a cancellation, a winner elsewhere).
        self.cancelled = threading.Event()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._own_session = True

    @property
    def path(self) -> str:
        """The node's files on the host (the dir backend)."""
        return os.fspath(self.node)

    def __fspath__(self) -> str:
        return os.fspath(self.node)

    def __str__(self) -> str:
        return self.node.path or self.node.id

    def run(self, argv: Sequence[str] | str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
            timeout: float | None = None, check: bool = False) -> ExecResult:
        """Run a process in the attempt's node and wait: through the backend's exec where
        it has one, else on the host in the node's directory, in a session of its own so
        that a kill reaches it and its children. ``check`` raises on a non-zero exit."""
        if self.cancelled.is_set():
            raise ArborError(f"attempt {self.index}: cancelled", "cancelled")
        env = {"ARBOR_ATTEMPT": str(self.index), **(env or {})}
        if self.backend != "dir":
            r = self.node.exec(argv, cwd=cwd, env=env, timeout=timeout)
        else:
            r = self._run_local(argv, cwd, env, timeout)
        if check and r.exit_code != 0:
            raise ArborError(f"attempt {self.index}: {argv!r} exited {r.exit_code or r.signal}: "
                             f"{r.stderr.decode(errors='replace')[-400:]}", "attempt_failed")
        return r

    def _run_local(self, argv: Sequence[str] | str, cwd: str | None, env: Mapping[str, str],
                   timeout: float | None) -> ExecResult:
        start = time.monotonic()
        p = subprocess.Popen(argv, shell=isinstance(argv, str), cwd=os.path.join(self.path, cwd or ""),
                             env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=self._own_session)
        with self._lock:
            self._procs.append(p)
        if self.cancelled.is_set():
            self._kill_procs()
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_group(p)
            out, err = p.communicate()
        finally:
            with self._lock:
                self._procs.remove(p)
        sig = signal.Signals(-p.returncode).name if p.returncode < 0 else None
        return ExecResult(None if sig else p.returncode, out, err, time.monotonic() - start, sig)

    def _kill_group(self, p: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL) if self._own_session else p.kill()
        except ProcessLookupError:
            pass

    def _kill_procs(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for p in procs:
            self._kill_group(p)


@dataclass
class Result:
    """What one attempt did."""

    index: int
    node_id: str | None
    success: bool = False
    value: Any = None
    error: str | None = None
    score: float | None = None
    path: str | None = None
    duration: float = 0.0
    #: Killed: by a timeout, a cancellation, or a sibling's win.
    killed: bool = False
    #: This attempt's commit won (Speculate, Cascaded: committed by the attempt itself).
    committed: bool = False
    #: This attempt succeeded but a sibling committed first.
    stale: bool = False
    number: int = 0


@dataclass
class Outcome:
    """A pattern's outcome: the winner (None if none succeeded), every attempt's result,
    and whether the winner's state was committed into the node the pattern ran on."""

    winner: Result | None
    all_results: list[Result] = field(default_factory=list)
    committed: bool = False

    @property
    def results(self) -> list[Result]:
        return self.all_results

    @property
    def scores(self) -> list[float | None]:
        return [r.score for r in self.all_results]


Candidate = Callable[..., Any]


def _interpret(ret: Any) -> tuple[bool, float | None]:
    """A candidate's return value: False fails, (ok, score) scores, anything else succeeds."""
    if ret is False:
        return False, None
    if isinstance(ret, tuple) and len(ret) == 2 and isinstance(ret[0], bool) and \
            isinstance(ret[1], (int, float)):
        return ret[0], float(ret[1])
    return True, None


async def _awaited(aw: Any) -> Any:
    return await aw


def _body(a: Attempt, fn: Candidate, args: tuple[Any, ...], commit: bool) -> Result:
    """Run one candidate (in a thread or a forked child) and, if asked, commit on success."""
    start = time.monotonic()
    res = Result(a.index, a.node.id, path=a.node.path, number=a.number)
    try:
        ret = fn(a, *args)
        if inspect.isawaitable(ret):  # an async candidate: its own event loop, in its worker
            ret = asyncio.run(_awaited(ret))
        ok, res.score = _interpret(ret)
        res.success, res.value = ok, ret
        if not ok:
            res.error = "returned False"
    except BaseException as e:  # noqa: BLE001 - an attempt's failure is data
        res.error = f"{type(e).__name__}: {e}"
        res.value = None
        if not isinstance(e, Exception):
            res.killed = True
    if res.success and commit and not a.cancelled.is_set():
        try:
            a.node.commit()
            res.committed = True
        except StaleError:
            res.stale = True
        except ArborError as e:
            res.success, res.error = False, f"commit: {e}"
    res.duration = time.monotonic() - start
    return res


class _Worker:
    """A running attempt, in a thread or in a forked child process."""

    def __init__(self, a: Attempt, fn: Candidate, args: tuple[Any, ...], commit: bool, runner: str,
                 done: queue.Queue[tuple[_Worker, Result]]) -> None:
        self.a, self.done, self.pid = a, done, 0
        if runner == "process":
            a._own_session = False  # the child's session holds its processes
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: run, send the result, never return
                code = 0
                try:
                    os.close(r)
                    os.setsid()
                    res = _body(a, fn, args, commit)
                    try:
                        data = pickle.dumps(res)
                    except Exception:  # noqa: BLE001
                        res.value = repr(res.value)
                        data = pickle.dumps(res)
                    with os.fdopen(w, "wb") as f:
                        f.write(data)
                except BaseException:  # noqa: BLE001
                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            os.close(w)
            self.pid = pid
            threading.Thread(target=self._reap, args=(r,), daemon=True).start()
        else:
            threading.Thread(target=lambda: done.put((self, _body(a, fn, args, commit))),
                             daemon=True).start()

    def _reap(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        os.waitpid(self.pid, 0)
        try:
            res = pickle.loads(data) if data else None
        except Exception:  # noqa: BLE001
            res = None
        if res is None:
            res = Result(self.a.index, self.a.node.id, error="the attempt's process died", killed=True,
                         path=self.a.node.path, number=self.a.number)
        self.done.put((self, res))

    def kill(self) -> None:
        """Kill the attempt's processes (and, for a process runner, the attempt itself)."""
        self.a.cancelled.set()
        if self.pid:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.a._kill_procs()


def _target(node: Node | Tree) -> Node:
    return node.root if isinstance(node, Tree) else node


def _backend(node: Node) -> str:
    try:
        return node.tree.info().backend
    except ArborError:
        return "dir"


def _abort(node: Node) -> None:
    try:
        node.abort()
    except ArborError:
        pass  # gone already (a commit merged it, or an abort of its parent)


class _Group:
    """One group of attempts forked with one fork_batch from ``parent``, run in parallel."""

    def __init__(self, parent: Node, calls: Sequence[tuple[Candidate, tuple[Any, ...]]], *,
                 runner: str, number: int = 0, feedback: Any = None, backend: str | None = None) -> None:
        if runner not in ("thread", "process"):
            raise ValueError(f"runner must be 'thread' or 'process', not {runner!r}")
        self.parent, self.calls, self.runner = parent, list(calls), runner
        self.backend = backend or _backend(parent)
        kids = parent.fork(len(self.calls)) if self.calls else []
        self.attempts = [Attempt(k, i, self.backend, number=number, feedback=feedback)
                         for i, k in enumerate(kids)]

    def run(self, *, commit_first: bool = False, timeout: float | None = None,
            max_parallel: int | None = None, cancel: threading.Event | None = None) -> list[Result]:
        """Run every attempt; with commit_first the first success commits and the others
        are killed and aborted. Attempts still running at the timeout are killed; their
        nodes are aborted. Other nodes are left for the caller (see ``settle``)."""
        done: queue.Queue[tuple[_Worker, Result]] = queue.Queue()
        pending = list(zip(self.attempts, self.calls))
        running: dict[int, _Worker] = {}
        results: dict[int, Result] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        limit = max_parallel or len(pending) or 1
        won = False
        try:
            while pending or running:
                while pending and len(running) < limit and not won:
                    a, (fn, args) = pending.pop(0)
                    running[a.index] = _Worker(a, fn, args, commit_first, self.runner, done)
                if won:
                    for a, _ in pending:
                        results[a.index] = Result(a.index, a.node.id, killed=True, error="not started: a sibling won")
                    pending = []
                if not running:
                    break
                wait = None if deadline is None else deadline - time.monotonic()
                if cancel is not None:
                    wait = 0.05 if wait is None else min(wait, 0.05)
                try:
                    w, res = done.get(timeout=None if wait is None else max(wait, 0))
                except queue.Empty:
                    if cancel is not None and cancel.is_set() or deadline is not None and time.monotonic() >= deadline:
                        break
                    continue
                if running.pop(w.a.index, None) is None:
                    continue
                results[res.index] = res
                if commit_first and res.committed:
                    won = True
                    self._kill(running, results, "a sibling won")
        finally:
            self._kill(running, results, "timed out" if not won else "a sibling won")
            for a, _ in pending:
                results.setdefault(a.index, Result(a.index, a.node.id, killed=True, error="not started"))
        return [results[a.index] for a in self.attempts]

    def _kill(self, running: dict[int, _Worker], results: dict[int, Result], why: str) -> None:
        for w in running.values():
            w.kill()
            _abort(w.a.node)
            results.setdefault(w.a.index, Result(w.a.index, w.a.node.id, killed=True, error=f"killed: {why}",
                                                 path=w.a.node.path, number=w.a.number))
        running.clear()

    def node(self, r: Result) -> Node:
        return self.attempts[r.index].node

    def attempt(self, r: Result) -> Attempt:
        return self.attempts[r.index]

    def settle(self, keep: Result | None = None) -> None:
        """Abort every attempt's node but ``keep``'s (nodes already merged or gone are skipped)."""
        for a in self.attempts:
            if keep is None or a.index != keep.index:
                _abort(a.node)


def _best(results: Sequence[Result]) -> Result | None:
    ok = [r for r in results if r.success]
    return max(ok, key=lambda r: (r.score if r.score is not None else 1.0, -r.index)) if ok else None


def _commit(group: _Group, r: Result | None) -> bool:
    """Commit r's node into the group's parent and abort the rest."""
    if r is None:
        group.settle()
        return False
    try:
        group.node(r).commit()
    finally:
        group.settle(keep=r)
    r.committed = True
    return True


class _Pattern:
    """What every pattern has besides ``__call__``."""

    async def arun(self, node: Node | Tree) -> Outcome:
        """Run the pattern from asyncio code (agent frameworks): the attempts run in their
        workers as always, and the event loop is not blocked meanwhile."""
        return await asyncio.to_thread(self, node)

    def __call__(self, node: Node | Tree) -> Outcome:
        raise NotImplementedError


class Speculate(_Pattern):
    """Race the candidates in parallel: the first to succeed commits, the others are killed
    and aborted (a later success loses the daemon's first-commit-wins race and is aborted)."""

    def __init__(self, candidates: Sequence[Candidate], *, first_wins: bool = True,
                 max_parallel: int | None = None, timeout: float | None = None, runner: str = "thread",
                 cancel: threading.Event | None = None) -> None:
        self.candidates, self.first_wins = list(candidates), first_wins
        self.max_parallel, self.timeout, self.runner, self.cancel = max_parallel, timeout, runner, cancel

    def __call__(self, node: Node | Tree) -> Outcome:
        g = _Group(_target(node), [(c, ()) for c in self.candidates], runner=self.runner)
        if not self.first_wins:  # every candidate to the end, the best one commits
            results = g.run(timeout=self.timeout, max_parallel=self.max_parallel, cancel=self.cancel)
            w = _best(results)
            return Outcome(w, results, _commit(g, w))
        results = g.run(commit_first=True, timeout=self.timeout, max_parallel=self.max_parallel,
                        cancel=self.cancel)
        winner = next((r for r in results if r.committed), None)
        g.settle(keep=winner)
        return Outcome(winner, results, winner is not None)


class BestOfN(_Pattern):
    """Run every candidate to the end, score the successes, commit the best and abort the
    rest. The score is ``evaluate(attempt)`` if given, else the candidate's ``(ok, score)``,
    else ``scores[i]``, else 1.0. ``commit=False`` aborts every attempt and only returns
    the scores (GRPO-style rollouts). ``BestOfN(candidate, n=8)`` runs one candidate 8 times."""

    def __init__(self, candidates: Sequence[Candidate] | Candidate, *, n: int | None = None,
                 scores: Sequence[float] | None = None, evaluate: Callable[[Attempt], float] | None = None,
                 timeout: float | None = None, commit: bool = True, max_parallel: int | None = None,
                 runner: str = "thread") -> None:
        if callable(candidates):
            candidates = [candidates] * (n or 1)
        self.candidates, self.scores, self.evaluate = list(candidates), scores, evaluate
        self.timeout, self.commit, self.max_parallel, self.runner = timeout, commit, max_parallel, runner

    def __call__(self, node: Node | Tree) -> Outcome:
        g = _Group(_target(node), [(c, ()) for c in self.candidates], runner=self.runner)
        results = g.run(timeout=self.timeout, max_parallel=self.max_parallel)
        for r in results:
            if not r.success:
                continue
            if self.evaluate is not None:
                r.score = float(self.evaluate(g.attempt(r)))
            elif r.score is None:
                r.score = float(self.scores[r.index]) if self.scores is not None else 1.0
        w = _best(results)
        if not self.commit:
            g.settle()
            return Outcome(w, results, False)
        return Outcome(w, results, _commit(g, w))


class Reflexion(_Pattern):
    """Try ``task(attempt, number, feedback)`` up to ``max_retries`` times, each in a fresh
    fork; a failed try is aborted and ``critique(attempt)`` (or its error) becomes the next
    try's feedback. The first success commits."""

    def __init__(self, task: Candidate, *, max_retries: int = 3,
                 critique: Callable[[Attempt], str] | None = None, timeout: float | None = None,
                 runner: str = "thread") -> None:
        self.task, self.max_retries, self.critique = task, max_retries, critique
        self.timeout, self.runner = timeout, runner

    def __call__(self, node: Node | Tree) -> Outcome:
        parent, feedback, results = _target(node), None, []
        backend = _backend(parent)
        for number in range(self.max_retries):
            g = _Group(parent, [(self.task, (number, feedback))], runner=self.runner, number=number,
                       feedback=feedback, backend=backend)
            (r,) = g.run(timeout=self.timeout)
            r.number = number
            if r.success:
                ok = _commit(g, r)
                r.index = number
                results.append(r)
                return Outcome(r, results, ok)
            r.index = number
            results.append(r)
            if self.critique is not None and not r.killed:
                try:
                    feedback = self.critique(g.attempts[0])
                except Exception as e:  # noqa: BLE001
                    feedback = f"critique failed: {e}"
            else:
                feedback = r.error
            g.settle()
        return Outcome(None, results, False)


class TreeOfThoughts(_Pattern):
    """Run the strategies in parallel and commit the best success by ``evaluate``. With
    ``max_depth`` > 1 everything happens in a root branch: each level's winner commits
    into it, ``expand(root, depth)`` makes the next level's strategies from that
    accumulated state, and a level without a winner aborts the root."""

    def __init__(self, strategies: Sequence[Candidate], *, evaluate: Callable[[Attempt], float],
                 expand: Callable[[Attempt, int], Sequence[Candidate]] | None = None, max_depth: int = 1,
                 timeout: float | None = None, runner: str = "thread") -> None:
        self.strategies, self.evaluate, self.expand = list(strategies), evaluate, expand
        self.max_depth, self.timeout, self.runner = max_depth, timeout, runner

    def _level(self, parent: Node, strategies: Sequence[Candidate], backend: str,
               depth: int) -> tuple[Result | None, list[Result], bool]:
        g = _Group(parent, [(s, ()) for s in strategies], runner=self.runner, number=depth, backend=backend)
        results = g.run(timeout=self.timeout)
        for r in results:
            if r.success:
                r.score = float(self.evaluate(g.attempt(r)))
        w = _best(results)
        return w, results, _commit(g, w)

    def __call__(self, node: Node | Tree) -> Outcome:
        parent = _target(node)
        backend = _backend(parent)
        if self.max_depth <= 1:
            w, results, committed = self._level(parent, self.strategies, backend, 0)
            return Outcome(w, results, committed)
        root = parent.fork(label="tot-root")
        all_results: list[Result] = []
        strategies, w = self.strategies, None
        try:
            for depth in range(self.max_depth):
                w, results, _ = self._level(root, strategies, backend, depth)
                all_results += results
                if w is None:
                    _abort(root)
                    return Outcome(None, all_results, False)
                if depth + 1 < self.max_depth:
                    if self.expand is None:
                        break
                    strategies = list(self.expand(Attempt(root, 0, backend, number=depth), depth + 1))
                    if not strategies:
                        break
            root.commit()
        except BaseException:
            _abort(root)
            raise
        return Outcome(w, all_results, True)


class BeamSearch(_Pattern):
    """Keep the ``beam_width`` best successes alive per level; each beam grows its own state
    in nested forks (``expand(beam, depth)`` gives its next strategies); at the end the best
    beam's chain is committed into the node the search ran on and the rest is aborted."""

    def __init__(self, strategies: Sequence[Candidate], *, expand: Callable[[Attempt, int], Sequence[Candidate]],
                 evaluate: Callable[[Attempt], float], beam_width: int = 3, max_depth: int = 2,
                 timeout: float | None = None, runner: str = "thread") -> None:
        self.strategies, self.expand, self.evaluate = list(strategies), expand, evaluate
        self.beam_width, self.max_depth, self.timeout, self.runner = beam_width, max_depth, timeout, runner

    def __call__(self, node: Node | Tree) -> Outcome:
        parent = _target(node)
        backend = _backend(parent)
        chain: dict[str, list[Node]] = {}  # node id -> its ancestors below parent, then itself
        all_results: list[Result] = []
        top: list[Node] = []  # the level-0 nodes, to abort at the end
        beams: list[tuple[Result, Attempt]] = []
        level: list[tuple[Node, Sequence[Candidate]]] = [(parent, self.strategies)]
        for depth in range(self.max_depth):
            scored: list[tuple[Result, Attempt]] = []
            groups = [_Group(p, [(s, ()) for s in strats], runner=self.runner, number=depth, backend=backend)
                      for p, strats in level if strats]
            threads_results: list[list[Result]] = [[] for _ in groups]

            def run(i: int) -> None:
                threads_results[i] = groups[i].run(timeout=self.timeout)
            ts = [threading.Thread(target=run, args=(i,)) for i in range(len(groups))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            for g, results in zip(groups, threads_results):
                for r in results:
                    r.number = depth
                    all_results.append(r)
                    a = g.attempt(r)
                    chain[a.node.id] = chain.get(g.parent.id, []) + [a.node]
                    if depth == 0:
                        top.append(a.node)
                    if r.success:
                        r.score = float(self.evaluate(a))
                        scored.append((r, a))
            if not scored:
                for g in groups:
                    g.settle()
                break  # keep the beams of the level before
            scored.sort(key=lambda ra: -(ra[0].score or 0.0))
            keep = scored[:self.beam_width]
            kept = {a.node.id for _, a in keep}
            for g in groups:
                for a in g.attempts:
                    if a.node.id not in kept:
                        _abort(a.node)
            beams = keep
            if depth + 1 < self.max_depth:
                level = [(a.node, list(self.expand(a, depth + 1))) for _, a in beams]
        if not beams:
            return Outcome(None, all_results, False)
        best_r, best_a = beams[0]
        path = chain[best_a.node.id]
        for n in top:
            if n.id != path[0].id:
                _abort(n)
        for n in reversed(path):  # the leaf into its beam, ... the first level into parent
            for stale in n.commit():
                _abort(stale)
        best_r.committed = True
        return Outcome(best_r, all_results, True)


class Tournament(_Pattern):
    """Run every candidate, then a single-elimination bracket of ``judge(a, b)`` calls
    (0: a wins, 1: b wins; an odd one out gets a bye) among the successes; the bracket's
    winner commits."""

    def __init__(self, candidates: Sequence[Candidate], *, judge: Callable[[Attempt, Attempt], int],
                 timeout: float | None = None, runner: str = "thread") -> None:
        self.candidates, self.judge, self.timeout, self.runner = list(candidates), judge, timeout, runner

    def __call__(self, node: Node | Tree) -> Outcome:
        g = _Group(_target(node), [(c, ()) for c in self.candidates], runner=self.runner)
        results = g.run(timeout=self.timeout)
        bracket = [r for r in results if r.success]
        rnd = 0
        while len(bracket) > 1:
            nxt = []
            for i in range(0, len(bracket) - 1, 2):
                a, b = bracket[i], bracket[i + 1]
                nxt.append(b if self.judge(g.attempt(a), g.attempt(b)) == 1 else a)
            if len(bracket) % 2:
                nxt.append(bracket[-1])  # a bye
            bracket, rnd = nxt, rnd + 1
        w = bracket[0] if bracket else None
        if w is not None:
            w.score = float(rnd)
        return Outcome(w, results, _commit(g, w))


class Cascaded(_Pattern):
    """Waves of growing width (``fan_out``): each wave races ``task(attempt, feedback)``
    (first success commits); every failure's error joins ``feedback`` for the waves
    after. ``task`` returns ``(ok, error)``; ``wave_timeout`` bounds each wave and
    ``timeout`` the whole cascade."""

    def __init__(self, task: Candidate, *, fan_out: Sequence[int] = (1, 2, 4), timeout: float | None = None,
                 wave_timeout: float | None = None, runner: str = "thread") -> None:
        self.task, self.fan_out, self.timeout, self.wave_timeout = task, list(fan_out), timeout, wave_timeout
        self.runner = runner

    def __call__(self, node: Node | Tree) -> Outcome:
        parent = _target(node)
        backend = _backend(parent)
        feedback: list[str] = []
        results: list[Result] = []
        deadline = None if self.timeout is None else time.monotonic() + self.timeout

        def task(a: Attempt, fb: list[str]) -> Any:
            ret = self.task(a, fb)
            if isinstance(ret, tuple) and len(ret) == 2 and isinstance(ret[0], bool) and not isinstance(
                    ret[1], (int, float)):
                if not ret[0]:
                    raise AttemptFailed(str(ret[1]))
                return True
            return ret
        for wave, width in enumerate(self.fan_out):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            bounds = [x for x in (left, self.wave_timeout) if x is not None]
            t = min(bounds) if bounds else None
            g = _Group(parent, [(task, (list(feedback),))] * width, runner=self.runner, number=wave,
                       feedback=list(feedback), backend=backend)
            wave_results = g.run(commit_first=True, timeout=t)
            winner = next((r for r in wave_results if r.committed), None)
            g.settle(keep=winner)
            for r in wave_results:
                r.number, r.index = wave, r.index + len(results)
                if not r.success and r.error and not r.killed:
                    r.error = r.error.removeprefix("AttemptFailed: ")
                    feedback.append(r.error)
            results += wave_results
            if winner is not None:
                return Outcome(winner, results, True)
        return Outcome(None, results, False)


class AttemptFailed(Exception):
    """Raised inside Cascaded for a task that returned (False, error)."""
