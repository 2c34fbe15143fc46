"""Where the daemon is: the same rules as the arbor CLI (internal/cli).

- ``$ARBOR_HOME``, else /var/lib/arbor as root, else ~/.local/share/arbor;
- the socket: the ``socket`` key of HOME/arbord.toml if it names one, else
  HOME/arbord.sock;
- HTTP when ``$ARBOR_URL`` is set (or a url is given), with the bearer token of
  ``$ARBOR_TOKEN``, else the one the daemon keeps in HOME/http.token.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

#: The file in the daemon's home holding the HTTP token (api.HTTPTokenFile).
TOKEN_FILE = "http.token"


def home() -> str:
    """Arbor's state directory, as the CLI finds it."""
    h = os.environ.get("ARBOR_HOME")
    if h:
        return h
    if os.geteuid() == 0:
        return "/var/lib/arbor"
    if os.environ.get("HOME"):
        return os.path.join(os.environ["HOME"], ".local", "share", "arbor")
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), "arbor")


def _configured_socket(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    if sys.version_info >= (3, 11):
        import tomllib
        try:
            v = tomllib.loads(raw.decode()).get("socket")
        except ValueError:
            return None  # the daemon reports a broken file itself
        return v if isinstance(v, str) and v else None
    else:  # no tomllib: the one key we need, read plainly
        m = re.search(r'^\s*socket\s*=\s*"([^"]+)"', raw.decode(errors="replace"), re.M)
        return m.group(1) if m else None


def socket_path(home_dir: str | None = None) -> str:
    """The daemon's socket for a home (default: :func:`home`)."""
    h = home_dir or home()
    return _configured_socket(os.path.join(h, "arbord.toml")) or os.path.join(h, "arbord.sock")


def load_token(home_dir: str | None = None) -> str | None:
    """The HTTP token kept in HOME/http.token, or None when it cannot be read."""
    try:
        with open(os.path.join(home_dir or home(), TOKEN_FILE)) as f:
            tok = f.read().strip()
    except OSError:
        return None
    return tok or None


@dataclass(frozen=True)
class Endpoint:
    """One way to reach the daemon: a socket path, or a URL and a token."""

    socket: str | None = None
    url: str | None = None
    token: str | None = None

    @property
    def transport(self) -> str:
        return "http" if self.url else "socket"


def endpoint(*, socket: str | None = None, url: str | None = None, token: str | None = None,
             home_dir: str | None = None) -> Endpoint:
    """Resolve the arguments and the environment into an :class:`Endpoint`."""
    if socket:
        return Endpoint(socket=socket)
    url = url or os.environ.get("ARBOR_URL") or None
    if url:
        tok = token or os.environ.get("ARBOR_TOKEN") or load_token(home_dir)
        return Endpoint(url=url.rstrip("/"), token=tok)
    return Endpoint(socket=socket_path(home_dir))
