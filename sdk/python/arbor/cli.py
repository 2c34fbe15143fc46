"""``arbor-py`` (and ``python3 -m arbor``): BranchContext's command-line patterns over Arbor.

    arbor-py run [--tree T] -- CMD ARGS...        CMD in a fresh branch: commit on exit 0, else abort
    arbor-py speculate -c CMD -c CMD ...          all in parallel; the first to succeed commits,
                                                  the others are killed and aborted
    arbor-py best-of-n -n N [--score CMD] -- CMD  N attempts; the best score (CMD's stdout, run in
                                                  the attempt's files) commits

The tree is ``--tree``, else ``$ARBOR_TREE``, else the tree whose base holds the
current directory (one is created over the current directory when none does).
Commands run in the branch's copy of the current directory, with ARBOR_TREE,
ARBOR_NODE and ARBOR_ATTEMPT set; on a sandbox backend through its exec.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from .client import Client, Tree
from .errors import ArborError, NotFoundError
from .patterns import Attempt, BestOfN, Outcome, Speculate


def _find_tree(c: Client, name: str | None, cwd: str, err: Any) -> tuple[Tree, str]:
    """The tree to work in and the current directory relative to its base."""
    name = name or os.environ.get("ARBOR_TREE") or None
    if name:
        t = c.tree(name)
        base = t.info().base
        rel = os.path.relpath(cwd, base)
        return t, "" if rel.startswith("..") or rel == "." else rel
    best = None
    for info in c.trees():
        if cwd == info.base or cwd.startswith(info.base.rstrip("/") + "/"):
            if best is None or len(info.base) > len(best.base):
                best = info
    if best is None:
        t = c.create_tree(cwd)
        print(f"arbor-py: made tree {t.id} over {cwd}", file=err)
        return t, ""
    rel = os.path.relpath(cwd, best.base)
    return c.tree(best.id), "" if rel == "." else rel


def _cmd_run(c: Client, args: argparse.Namespace, out: Any, err: Any) -> int:
    tree, rel = _find_tree(c, args.tree, os.getcwd(), err)
    src = tree.node(args.node) if args.node else tree.root
    child = src.fork(label="run")
    env = {"ARBOR_TREE": tree.id, "ARBOR_NODE": child.id, "ARBOR_ATTEMPT": "0"}
    try:
        if tree.info().backend == "dir":
            code = _run_local(args.cmd, os.path.join(os.fspath(child), rel), env, args.timeout)
        else:
            r = child.exec(args.cmd, cwd=rel or None, env=env, timeout=args.timeout,
                           on_stdout=lambda b: out.buffer.write(b), on_stderr=lambda b: err.buffer.write(b))
            code = r.exit_code if r.exit_code is not None else 128 + 9
    except BaseException:
        child.abort()
        raise
    if code == 0:
        child.commit()
        print(f"arbor-py: committed {child.id} into {src.id}", file=err)
    else:
        child.abort()
        print(f"arbor-py: exit {code}: aborted {child.id}", file=err)
    return code


def _run_local(cmd: Sequence[str], cwd: str, env: dict[str, str], timeout: float | None) -> int:
    """CMD in a session of its own, so that a timeout or ^C kills all of it."""
    p = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **env}, start_new_session=True)
    try:
        return p.wait(timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        if isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
            return 128 + signal.SIGKILL
        raise


def _shell(cmd: str, rel: str) -> Any:
    def candidate(a: Attempt) -> Any:
        r = a.run(cmd, cwd=rel or None, timeout=None)
        return (r.exit_code == 0, 1.0) if r.exit_code == 0 else False
    candidate.__name__ = cmd
    return candidate


def _report(o: Outcome, labels: Sequence[str], args: argparse.Namespace, out: Any, err: Any) -> int:
    if args.json:
        json.dump({"committed": o.committed, "winner": o.winner.index if o.winner else None,
                   "results": [{"index": r.index, "command": labels[r.index % len(labels)], "success": r.success,
                                "score": r.score, "killed": r.killed, "error": r.error,
                                "duration_s": round(r.duration, 4)} for r in o.results]}, out, indent=1)
        out.write("\n")
    for r in o.results:
        state = "won" if o.winner is r else "ok" if r.success else "killed" if r.killed else "failed"
        score = f" score {r.score:g}" if r.score is not None and r.success else ""
        print(f"  [{r.index}] {state}{score}  {labels[r.index % len(labels)]}  {r.error or ''}".rstrip(), file=err)
    if o.winner is None:
        print("arbor-py: no attempt succeeded; nothing committed", file=err)
        return 1
    print(f"arbor-py: committed attempt {o.winner.index}", file=err)
    return 0


def _cmd_speculate(c: Client, args: argparse.Namespace, out: Any, err: Any) -> int:
    tree, rel = _find_tree(c, args.tree, os.getcwd(), err)
    src = tree.node(args.node) if args.node else tree.root
    o = Speculate([_shell(cmd, rel) for cmd in args.c], timeout=args.timeout)(src)
    return _report(o, args.c, args, out, err)


def _cmd_best_of_n(c: Client, args: argparse.Namespace, out: Any, err: Any) -> int:
    tree, rel = _find_tree(c, args.tree, os.getcwd(), err)
    src = tree.node(args.node) if args.node else tree.root
    cmd = args.cmd if len(args.cmd) != 1 else args.cmd[0]
    line = cmd if isinstance(cmd, str) else subprocess.list2cmdline(cmd)

    def candidate(a: Attempt) -> bool:
        return a.run(cmd, cwd=rel or None).exit_code == 0

    def evaluate(a: Attempt) -> float:
        r = a.run(args.score, cwd=rel or None)
        try:
            return float(r.stdout.decode().split()[-1])
        except (ValueError, IndexError):
            raise ArborError(f"--score printed no number: {r.stdout[:80]!r}", "bad_request") from None
    o = BestOfN(candidate, n=args.n, evaluate=evaluate if args.score else None, timeout=args.timeout)(src)
    return _report(o, [line], args, out, err)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="arbor-py", description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", help="arbord's socket (default $ARBOR_HOME/arbord.sock)")
    p.add_argument("--url", help="arbord's HTTP face instead (default $ARBOR_URL), token from $ARBOR_TOKEN")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--tree", help="the tree (default $ARBOR_TREE, or the one whose base holds the cwd)")
        sp.add_argument("--node", help="fork from this node (default the tree's root)")
        sp.add_argument("--timeout", type=float, help="seconds before attempts are killed and aborted")
        sp.add_argument("--json", action="store_true", help="print the outcome as JSON")
    r = sub.add_parser("run", help="run CMD in a fresh branch: commit on exit 0, abort otherwise")
    common(r)
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    s = sub.add_parser("speculate", help="race commands; the first success commits, the rest are killed")
    common(s)
    s.add_argument("-c", action="append", required=True, metavar="CMD", help="a shell command (repeat)")
    b = sub.add_parser("best-of-n", help="N attempts of CMD; the best --score commits")
    common(b)
    b.add_argument("-n", type=int, required=True, help="attempts")
    b.add_argument("--score", metavar="CMD", help="shell command printing the attempt's score (run in its files)")
    b.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return p


def main(argv: Sequence[str] | None = None, out: Any = None, err: Any = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = parser().parse_args(argv)
    if hasattr(args, "cmd"):
        args.cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not args.cmd:
            print(f"arbor-py {args.command}: give the command after --", file=err)
            return 2
    try:
        with Client(args.socket, url=args.url) as c:
            run = {"run": _cmd_run, "speculate": _cmd_speculate, "best-of-n": _cmd_best_of_n}[args.command]
            return run(c, args, out, err)
    except NotFoundError as e:
        print(f"arbor-py: {e}", file=err)
        return 1
    except ArborError as e:
        print(f"arbor-py: {e}", file=err)
        return 1
