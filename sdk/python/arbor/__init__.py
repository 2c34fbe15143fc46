"""Arbor from Python: branchable agent environments over the arbord daemon.

    import arbor
    tree = arbor.Tree.create(base="./app")
    with tree.root.branch() as b:          # fork; commit on success, abort on error
        open(f"{b.path}/notes.txt", "w").write("tried it")

The blocking API is :class:`Client`, :class:`Tree`, :class:`Node`; the asyncio one
is in :mod:`arbor.aio` with the same methods; the seven exploration patterns are in
:mod:`arbor.patterns`. Every wire error is a typed exception (:mod:`arbor.errors`).
"""

from .client import Client, ExecStream, Files, Node, Process, Tree, Watch, default_client
from .errors import (ArborError, AttemptError, AuthError, BadRequestError, BudgetError, BusyError,
                     ConnectionLost, DaemonUnavailable, ExistsError, ForbiddenError, InternalError,
                     LimitError, NoSpaceError, NotFoundError, NotSupportedError, ProtectedError,
                     StaleError, StateError, Timeout, UnavailableError)
from .types import (Budget, Event, ExecResult, FileInfo, ImageBuild, ImageInfo, NodeInfo, Output, ProcessInfo,
                    Snapshot, TreeInfo, Usage)

#: The SDK's version: the daemon's (internal/daemon.Version), released together.
__version__ = "0.1.0"

__all__ = [
    "Client", "Tree", "Node", "Files", "Process", "Watch", "ExecStream", "default_client",
    "Budget", "Usage", "NodeInfo", "TreeInfo", "Snapshot", "Event", "ExecResult", "Output", "FileInfo",
    "ProcessInfo", "ImageInfo", "ImageBuild",
    "ArborError", "BadRequestError", "NotFoundError", "ExistsError", "StaleError", "BudgetError",
    "ProtectedError", "StateError", "BusyError", "NoSpaceError", "LimitError", "AuthError",
    "ForbiddenError", "UnavailableError", "NotSupportedError", "InternalError", "ConnectionLost",
    "DaemonUnavailable", "Timeout", "AttemptError", "__version__",
]
