"""What the pattern examples share: a throwaway project and a tree over it."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import arbor  # noqa: E402


@contextlib.contextmanager
def project(files: dict[str, str]) -> Iterator[tuple[arbor.Tree, str]]:
    """A temporary base directory holding ``files``, and a tree over it (deleted after)."""
    with tempfile.TemporaryDirectory(prefix="arbor-example-") as base:
        for name, text in files.items():
            with open(os.path.join(base, name), "w") as f:
                f.write(text)
        tree = arbor.Tree.create(base=base)
        try:
            yield tree, base
        finally:
            tree.delete()


def show(outcome: arbor.patterns.Outcome, base: str, name: str) -> None:
    w = outcome.winner
    print(f"winner: {w.index if w else None}  committed: {outcome.committed}")
    for r in outcome.results:
        print(f"  attempt {r.index}: success={r.success} score={r.score} killed={r.killed} {r.error or ''}")
    with open(os.path.join(base, name)) as f:
        print(f"{name} in the base now: {f.read().strip()!r}")


import arbor.patterns  # noqa: E402,F401  (show's annotation)
