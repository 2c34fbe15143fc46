"""Typed exceptions for Arbor's wire errors.

Every error reply of the daemon, ``{"status":"error","code":...,"message":...}``
over the socket or the same body with an HTTP status, becomes an instance of
the :class:`ArborError` subclass of its code, carrying ``code`` and
``message`` (and ``http_status`` where HTTP carried it). The table is
api/api.go's error table; an unknown code becomes a plain :class:`ArborError`
so a newer daemon never breaks an older SDK.

Failures that are not replies have their own classes: :class:`ConnectionLost`
(the daemon went away mid-call), :class:`DaemonUnavailable` (nothing answers at
the socket or URL), :class:`Timeout` (the call's own deadline passed).
"""

from __future__ import annotations

import re
from typing import Any


class ArborError(Exception):
    """An error from Arbor: ``code`` is the wire code, ``message`` the daemon's text."""

    code: str = "internal"

    def __init__(self, message: str, code: str | None = None, *, http_status: int | None = None,
                 op: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.http_status = http_status
        self.op = op

    def __str__(self) -> str:
        return f"{self.message} [{self.code}]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class BadRequestError(ArborError):
    """Malformed input: a bad name, a missing argument, bad JSON."""
    code = "bad_request"


class NotFoundError(ArborError):
    """An unknown tree, node or branch."""
    code = "not_found"


class ExistsError(ArborError):
    """A tree or branch of that name already exists."""
    code = "exists"


class StaleError(ArborError):
    """Lost a first-commit-wins race, or the node is stale (only abort and prune apply)."""
    code = "stale"


class BudgetError(ArborError):
    """The verb would exceed a budget that eviction cannot free."""
    code = "budget"


class ProtectedError(ArborError):
    """The verb would delete or evict a protected node."""
    code = "protected"


class StateError(ArborError):
    """The node is in a state the verb does not apply to (e.g. commit of the root)."""
    code = "bad_state"


class BusyError(ArborError):
    """A resource is in use."""
    code = "busy"


class NoSpaceError(ArborError):
    """A quota was reached."""
    code = "no_space"


class LimitError(ArborError):
    """A daemon limit: too many connections, or one closed for idling."""
    code = "limit"


class AuthError(ArborError):
    """No or a wrong credential (the HTTP token, a uid not admitted to the socket)."""
    code = "unauthorized"


class ForbiddenError(ArborError):
    """The requester may not do that: name that path, build or remove images, or own a
    jail or vm tree (only root and the daemon's uid may)."""
    code = "forbidden"


class UnavailableError(ArborError):
    """The host cannot do it (no usable /dev/fuse, ...); ``arbor doctor`` says how to fix it."""
    code = "unavailable"


class NotSupportedError(ArborError):
    """The tree's backend (or this daemon) does not offer the verb: exec on the dir backend,
    or a verb newer than the daemon."""
    code = "not_supported"


class InternalError(ArborError):
    """The daemon failed serving the request."""
    code = "internal"


class ConnectionLost(ArborError):
    """The connection to the daemon dropped before the reply came (the verb may or may not
    have been applied)."""
    code = "connection_lost"


class DaemonUnavailable(ArborError):
    """Nothing answers at the socket or URL (is arbord running? ``arbor ping`` starts it)."""
    code = "daemon_unavailable"


class Timeout(ArborError, TimeoutError):
    """The call's own timeout passed before the reply came."""
    code = "timeout"


class AttemptError(ArborError):
    """An exploration attempt failed (raised by patterns when no attempt succeeded)."""
    code = "attempt_failed"


#: Wire code -> exception class (api/api.go's table, plus not_supported).
CODES: dict[str, type[ArborError]] = {
    c.code: c for c in (
        BadRequestError, NotFoundError, ExistsError, StaleError, BudgetError, ProtectedError,
        StateError, BusyError, NoSpaceError, LimitError, AuthError, ForbiddenError,
        UnavailableError, NotSupportedError, InternalError,
    )
}

# What a daemon older than a verb answers: the socket face's strict decoder
# refuses the op or its new fields, the HTTP face has no route for it. Only
# for the ops the SDK knows to be newer (NEWER_OPS) is that read as "not
# supported" rather than as the caller's mistake.
_OLDER_DAEMON = re.compile(r'unknown op |unknown field |^no route ')

#: Ops that a daemon may predate (issue 11's process verbs, the image verbs).
NEWER_OPS = frozenset({
    "exec", "tree_exec", "exec_start", "exec_kill", "exec_list", "exec_logs",
    "file_read", "file_write", "file_list", "file_stat", "file_remove", "file_mkdir",
    "image_build", "image_list", "image_rm",
})


def from_reply(reply: dict[str, Any], *, op: str | None = None,
               http_status: int | None = None) -> ArborError:
    """The exception for an error reply (``status == "error"``)."""
    code = str(reply.get("code") or "internal")
    message = str(reply.get("message") or f"arbord answered {code}")
    cls = CODES.get(code, ArborError)
    if op in NEWER_OPS and code in ("bad_request", "not_found") and _OLDER_DAEMON.search(message):
        cls, message = NotSupportedError, f"{op}: this arbord does not serve it ({message})"
        code = NotSupportedError.code
    return cls(message, code, http_status=http_status, op=op)
