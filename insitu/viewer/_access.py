"""Who may use a viewer, and what a request body may be: pure checks, no I/O.

A viewer answers only requests that name it (the ``Host`` header, and ``Origin`` when a
browser sends one, must be one of the viewer's own addresses: this defeats DNS
rebinding, where a web page's name is re-pointed at 127.0.0.1) and that carry its
per-run secret token (in the ``token`` query parameter, the ``X-Insitu-Token`` header or
the cookie the page sets). Every check returns the reason for a refusal, or None.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import urllib.parse
from collections.abc import Iterable

__all__ = ["Access", "Refused", "body_length"]

#: Names every viewer answers to, whatever it is bound to (compared lower-case, IPv6 without brackets).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("", "0.0.0.0", "::")


class Refused(Exception):
    """A request refused with an HTTP status `code` and a short `message`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _short(text: str, n: int = 60) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def _authority(value: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``Host`` header value (``name[:port]``, ``[v6][:port]``); None if malformed."""
    if not value or any(c in value for c in "/?#@\\ \t"):
        return None
    try:
        u = urllib.parse.urlsplit("//" + value)
        port = u.port  # ValueError outside 0..65535 or not a number
    except ValueError:
        return None
    if not u.hostname:
        return None
    return u.hostname, 80 if port is None else port


class Access:
    """The Host, Origin and token checks of one viewer.

    Parameters
    ----------
    token : str
        The per-run secret.
    bound : str
        The address the server is bound to (``server_address[0]``).
    port : int
        The port it listens on.
    names : iterable of str
        Further host names it answers to (the ``host`` a user asked for, such as a machine name).
    """

    def __init__(self, token: str, bound: str, port: int, names: Iterable[str] = ()) -> None:
        if not token:
            raise ValueError("token: expected a non-empty secret")
        self.token, self.port = token, int(port)
        self._token = token.encode()
        self.wildcard = bound in WILDCARDS
        hosts = {*LOOPBACK_NAMES, bound, *names}
        if self.wildcard:  # reachable under this machine's names too
            hosts |= {socket.gethostname(), socket.getfqdn()}
        self.hosts = frozenset(h.strip("[]").lower() for h in hosts if h and h not in WILDCARDS)

    def _ours(self, value: str) -> bool:
        a = _authority(value)
        if a is None or a[1] != self.port:
            return False
        if a[0] in self.hosts:
            return True
        if self.wildcard:  # any address of this machine; an IP literal cannot be re-pointed by DNS
            try:
                ipaddress.ip_address(a[0])
                return True
            except ValueError:
                return False
        return False

    def host_error(self, values: list[str]) -> str | None:
        """Why the ``Host`` header(s) `values` are refused, or None."""
        if len(values) != 1:
            return f"expected one Host header, got {len(values)}"
        if not self._ours(values[0].strip()):
            return (f"Host {_short(values[0])} is not this viewer's address "
                    f"(127.0.0.1:{self.port}, localhost:{self.port}, [::1]:{self.port})")
        return None

    def origin_error(self, values: list[str]) -> str | None:
        """Why the ``Origin`` header(s) `values` are refused (none is fine: not a browser, or same-origin GET)."""
        if not values:
            return None
        if len(values) != 1:
            return f"expected at most one Origin header, got {len(values)}"
        try:
            u = urllib.parse.urlsplit(values[0].strip())
        except ValueError:
            u = None
        if u is None or u.scheme != "http" or u.path or u.query or u.fragment or not self._ours(u.netloc):
            return f"Origin {_short(values[0])} is not this viewer's page; cross-site requests are refused"
        return None

    def token_ok(self, candidates: Iterable[str]) -> bool:
        """Whether one of `candidates` is the token (compared in constant time)."""
        ok = False
        for c in candidates:
            ok |= hmac.compare_digest(c.encode("utf-8", "replace"), self._token)
        return ok


def body_length(values: list[str], chunked: bool, limit: int) -> int:
    """The body size a request announces, checked before reading a byte of it.

    Parameters
    ----------
    values : list of str
        Its ``Content-Length`` headers.
    chunked : bool
        Whether it has a ``Transfer-Encoding`` header (not accepted: sizes must be known up front).
    limit : int
        The largest body accepted, in bytes.

    Raises
    ------
    Refused
        411 without a length, 400 for a malformed one (negative, not a number, several
        that differ), 413 above `limit`.
    """
    if chunked:
        raise Refused(411, "send the body with a Content-Length header; Transfer-Encoding is not accepted")
    if not values:
        raise Refused(411, "send the body with a Content-Length header")
    texts = {v.strip() for v in values}
    if len(texts) != 1:
        raise Refused(400, f"Content-Length: several different values {sorted(map(_short, texts))}")
    text = texts.pop()
    if not (text.isascii() and text.isdigit()):
        raise Refused(400, f"Content-Length: expected a number of bytes >= 0, got {_short(text)}")
    if len(text.lstrip("0")) > len(str(limit)) or int(text) > limit:
        raise Refused(413, f"body of {_short(text)} bytes; at most {limit}")
    return int(text)
