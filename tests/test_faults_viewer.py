"""Hostile requests to ``insitu view`` (issue 19, items 2 and 5): refused, and the page still answers.

Loopback only (the ``--host 0.0.0.0`` test serves a BP5 replay for a few seconds, token
protected, and talks to it over 127.0.0.1). Viewer processes are ended by pid.
"""

import base64
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse

import pytest

from insitu.stream import FrameWriter
from insitu.viewer import serve
from test_viewer import Proc, pattern, until

TIMEOUT = 20  # seconds any single answer may take (generous: the machine is shared)


class Target:
    """A viewer to send requests to: its port and token (parsed leniently, so old code fails on behaviour)."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.port = u.port
        self.token = urllib.parse.parse_qs(u.query).get("token", [""])[0]
        self.host = f"127.0.0.1:{self.port}"


def request(t, method, path, headers=None, body=None, token=True, host=True):
    """``(status, headers, body)``; `headers` a list of pairs (repeats allowed), sent as given."""
    c = http.client.HTTPConnection("127.0.0.1", t.port, timeout=TIMEOUT)
    try:
        if token:
            path += ("&" if "?" in path else "?") + "token=" + t.token
        c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if host:
            c.putheader("Host", t.host)
        for k, v in headers or []:
            c.putheader(k, v)
        if body is not None and not any(k.lower() == "content-length" for k, _ in headers or []):
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        return r.status, r.headers, r.read()
    finally:
        c.close()


def error(body):
    return json.loads(body)["error"]


def exchange(port, data, timeout=TIMEOUT):
    """Send raw `data` on a new connection; return all the server sends until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                chunk = s.recv(1 << 16)
            except socket.timeout:
                break
            except ConnectionResetError:
                return out
            if not chunk:
                return out
            out += chunk
    raise AssertionError(f"the viewer kept the connection open {timeout} s after answering {out[:300]!r}")


def still_answers(t):
    code, _, body = request(t, "GET", "/status")
    assert code == 200 and "stream" in json.loads(body)


@pytest.fixture(scope="module")
def bp(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("replay") / "frames.bp")
    with FrameWriter(path, "BP5") as w:
        for s in range(3):
            w.write(pattern(s), step=s, time=0.1 * s)
    return path


@pytest.fixture(scope="module")
def replay(bp):
    """An in-process viewer replaying a BP5 file (steering off: POSTs end in 409 once parsed)."""
    v = serve(bp, rate=100)
    try:
        assert v.wait(30)
        v.target = Target(getattr(v, "url", ""))
        v.target.port = v.port
        yield v
    finally:
        v.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """``insitu view`` in a process of its own on an SST stream no writer has opened yet: steering is on."""
    stream = str(tmp_path_factory.mktemp("live") / "frames")
    v = Proc([sys.executable, "-m", "insitu.cli", "view", stream, "--no-browser", "--port", "0", "--timeout", "300"])
    try:
        line = v.wait_line("insitu view: serving ", 30)
        v.target = Target(line.split()[3])
        yield v
    finally:
        if v.p.poll() is None:
            os.kill(v.p.pid, signal.SIGTERM)
        v.finish(30)


# -- item 2: who may use the viewer -------------------------------------------------------

@pytest.mark.parametrize("path", ["/", "/status", "/frame.png", "/steer"])
def test_missing_or_wrong_token_is_refused_the_right_one_admitted(replay, path):
    t = replay.target
    code, _, body = request(t, "GET", path, token=False)
    assert code == 403 and "token" in error(body)
    wrong = t.token[:-1] + ("A" if t.token[-1:] != "A" else "B")
    for bad in (f"{path}?token={wrong}", f"{path}?token=", f"{path}?token={t.token}x"):
        code, _, body = request(t, "GET", bad, token=False)
        assert code == 403 and "token" in error(body), bad
    code, _, _ = request(t, "GET", path, token=False, headers=[("X-Insitu-Token", wrong)])
    assert code == 403
    code, _, body = request(t, "GET", path)  # ?token=
    assert code == 200, body
    code, _, _ = request(t, "GET", path, token=False, headers=[("X-Insitu-Token", t.token)])
    assert code == 200


def test_the_page_sets_a_strict_cookie_that_admits_later_requests(replay):
    t = replay.target
    code, h, page = request(t, "GET", "/")
    assert code == 200 and page.startswith(b"<!doctype html>")
    cookie = h["Set-Cookie"]
    name_value, *attrs = [x.strip() for x in cookie.split(";")]
    assert name_value.split("=", 1)[1] == t.token
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(attrs), cookie
    code, _, _ = request(t, "GET", "/status", token=False, headers=[("Cookie", name_value)])
    assert code == 200
    code, _, _ = request(t, "GET", "/status", token=False, headers=[("Cookie", name_value + "x")])
    assert code == 403
    code, _, _ = request(t, "GET", "/status", token=False, headers=[("Cookie", 'bad"cookie; =;')])
    assert code == 403
    still_answers(t)


@pytest.mark.parametrize("host", ["attacker.test:{port}", "127.0.0.1.attacker.test:{port}", "127.0.0.1:{other}",
                                  "localhost", "", "127.0.0.1:{port}@attacker.test", "[::1:{port}"])
def test_foreign_host_is_refused(replay, host):
    t = replay.target
    h = host.format(port=t.port, other=t.port + 1 if t.port < 65535 else t.port - 1)
    code, _, body = request(t, "GET", "/status", host=False, headers=[("Host", h)])
    assert code == 403 and "Host" in error(body), (h, body)
    code, _, body = request(t, "GET", "/", host=False, headers=[("Host", h)])
    assert code == 403


def test_two_hosts_or_none_are_refused(replay):
    t = replay.target
    code, _, _ = request(t, "GET", "/status", headers=[("Host", "attacker.test")])  # ours, then a foreign one
    assert code == 403
    code, _, _ = request(t, "GET", "/status", host=False)
    assert code == 403


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LocalHost:{port}", "[::1]:{port}"])
def test_own_names_are_admitted(replay, host):
    t = replay.target
    code, _, _ = request(t, "GET", "/status", host=False, headers=[("Host", host.format(port=t.port))])
    assert code == 200


@pytest.mark.parametrize("origin", ["http://attacker.test", "http://attacker.test:{port}", "null",
                                    "http://127.0.0.1:{other}", "https://127.0.0.1:{port}",
                                    "http://127.0.0.1:{port}/x", "file://"])
def test_foreign_origin_is_refused(replay, origin):
    t = replay.target
    o = origin.format(port=t.port, other=t.port + 1 if t.port < 65535 else t.port - 1)
    code, _, body = request(t, "GET", "/status", headers=[("Origin", o)])
    assert code == 403 and "Origin" in error(body), (o, body)
    code, _, body = request(t, "POST", "/steer", headers=[("Origin", o), ("Content-Type", "application/json")],
                            body=b'{"pause": true}')
    assert code == 403 and "Origin" in error(body)


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{port}", "http://localhost:{port}"])
def test_own_origin_is_admitted(replay, origin):
    t = replay.target
    code, _, _ = request(t, "GET", "/status", headers=[("Origin", origin.format(port=t.port))])
    assert code == 200


def test_security_headers_on_every_answer(replay):
    t = replay.target
    code, h, page = request(t, "GET", "/")
    answers = [(code, h), request(t, "GET", "/status", token=False)[:2],
               request(t, "GET", "/nothing")[:2], request(t, "GET", "/frame.png")[:2]]
    assert [c for c, _ in answers] == [200, 403, 404, 200]
    for c, h in answers:
        assert h["X-Frame-Options"] == "DENY", c
        assert h["X-Content-Type-Options"] == "nosniff", c
        assert h["Referrer-Policy"] == "no-referrer", c
        csp = [d.strip() for d in h["Content-Security-Policy"].split(";")]
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, csp
    # the page's own inline script and style are what the policy allows (headless Chromium runs them:
    # test_viewer.py::test_page_in_headless_chromium_shows_frames_and_steers)
    for tag in ("script", "style"):
        (inline,) = re.findall(rb"<%s>(.*?)</%s>" % (tag.encode(), tag.encode()), page, re.S)
        digest = base64.b64encode(hashlib.sha256(inline).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in csp
    assert b"style=" not in page and b"onclick=" not in page  # inline attributes would be blocked


def test_a_foreign_or_tokenless_post_does_not_steer(live):
    t = live.target
    js = [("Content-Type", "application/json")]
    for kw in ({"host": False, "headers": [("Host", f"attacker.test:{t.port}"), *js]},
               {"headers": [("Origin", "http://attacker.test"), *js]},
               {"token": False, "headers": js}):
        code, _, body = request(t, "POST", "/steer", body=b'{"stop": true}', **kw)
        assert code == 403, (kw, body)
    code, _, body = request(t, "GET", "/steer")
    assert code == 200 and json.loads(body)["state"] == {}  # nothing was steered
    code, _, body = request(t, "POST", "/steer", headers=js, body=b'{"pause": true}')
    assert code == 200 and json.loads(body)["state"] == {"pause": True}


def test_cli_warns_when_serving_beyond_loopback(bp):
    v = Proc([sys.executable, "-m", "insitu.cli", "view", bp, "--no-browser", "--host", "0.0.0.0", "--port", "0"])
    try:
        line = v.wait_line("insitu view: serving ", 30)
        until(lambda: any("warning" in e and "0.0.0.0" in e and "loopback" in e for e in v.err), 10, "the warning")
        t = Target(line.split()[3])
        assert re.fullmatch(r"[A-Za-z0-9_-]{40,}", t.token), line
        still_answers(t)  # over 127.0.0.1, with the token
        code, _, _ = request(t, "GET", "/status", token=False)
        assert code == 403
    finally:
        if v.p.poll() is None:
            os.kill(v.p.pid, signal.SIGTERM)
        assert v.finish(30) == 0, v.log()
    # the default binds to loopback and does not warn
    v = Proc([sys.executable, "-m", "insitu.cli", "view", bp, "--no-browser", "--port", "0", "--exit-at-end"])
    try:
        assert v.finish(60) == 0, v.log()
        assert not any("warning" in e for e in v.err), v.log()
    finally:
        if v.p.poll() is None:
            os.kill(v.p.pid, signal.SIGKILL)
            v.finish(10)


# -- item 5: request parsing and connections ------------------------------------------------

def _post_head(t, length, extra=b""):
    head = (f"POST /steer?token={t.token} HTTP/1.1\r\nHost: {t.host}\r\nContent-Type: application/json\r\n"
            .encode() + extra)
    if length is not None:
        head += f"Content-Length: {length}\r\n".encode()
    return head + b"\r\n"


@pytest.mark.parametrize("length, body, code", [
    ("-1", b'{"pause": true}', 400),
    ("abc", b'{"pause": true}', 400),
    ("9" * 400, b'{"pause": true}', 413),
    ("-" + "9" * 400, b'{"pause": true}', 400),
    ("70000", b'{"params": {"k": "' + b"x" * 69970 + b'"}}', 413),
    ("1e3", b"{}", 400),
    (None, b"", 411),
])
def test_bad_content_length_is_refused_once_and_the_viewer_goes_on(replay, length, body, code):
    t = replay.target
    out = exchange(t.port, _post_head(t, length) + body)
    assert out.startswith(f"HTTP/1.1 {code} ".encode()), out[:300]
    assert out.count(b"HTTP/1.1 ") == 1, out[:600]  # the unread body is not taken for a second request
    head, _, text = out.partition(b"\r\n\r\n")
    assert b"Content-Length" in text or b"body of" in text, text
    still_answers(t)


def test_chunked_or_conflicting_lengths_are_refused(replay):
    t = replay.target
    out = exchange(t.port, _post_head(t, None, b"Transfer-Encoding: chunked\r\n") + b"2\r\n{}\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 411 ") and out.count(b"HTTP/1.1 ") == 1, out[:300]
    out = exchange(t.port, _post_head(t, "2", b"Content-Length: 20\r\n") + b"{}")
    assert out.startswith(b"HTTP/1.1 400 ") and out.count(b"HTTP/1.1 ") == 1, out[:300]
    still_answers(t)


def test_a_short_body_is_refused_when_the_client_stops_sending(replay):
    t = replay.target
    with socket.create_connection(("127.0.0.1", t.port), timeout=TIMEOUT) as s:
        s.sendall(_post_head(t, "100") + b'{"pause"')
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(1 << 16):
            out += chunk
    assert out.startswith(b"HTTP/1.1 400 ") and b"ended after 8 of 100 bytes" in out, out[:300]


@pytest.mark.parametrize("depth", [20000, 1000, 17])
def test_deeply_nested_json_is_refused(replay, depth):
    t = replay.target
    code, _, body = request(t, "POST", "/steer", headers=[("Content-Type", "application/json")],
                            body=b"[" * depth + b"]" * depth)
    assert code == 400 and "nested too deeply" in error(body), body
    code, _, body = request(t, "POST", "/steer", headers=[("Content-Type", "application/json")],
                            body=b'{"":' * min(depth, 10000) + b"1" + b"}" * min(depth, 10000))  # within 64 KiB
    assert code == 400 and "nested too deeply" in error(body), body
    still_answers(t)


@pytest.mark.parametrize("body, match", [
    (b'{"params": {"k": ' + b"9" * 400 + b"}}", "params/k: expected a number"),
    (b'{"iso_values": [-' + b"9" * 400 + b"]}", "iso_values: expected a number"),
    (b'{"camera": {"zoom": ' + b"1" * 400 + b"}}", "camera/zoom: expected a positive number"),
    (b'{"params": {"k": ' + b"9" * 5000 + b"}}", "not JSON"),
    (b'{"pause": "yes"}', "pause: expected true or false"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"colormap": ["viridis"]}', "colormap: expected one of"),
    (b"\xff\xfe{}", "not JSON"),
    (b"NaN", "expected a JSON object"),
])
def test_malformed_updates_are_refused_with_400_naming_the_fault(live, body, match):
    t = live.target
    code, _, answer = request(t, "POST", "/steer", headers=[("Content-Type", "application/json")], body=body)
    assert code == 400 and match in error(answer), answer[:300]
    still_answers(t)


def test_idle_connections_hold_no_thread_and_are_closed(replay):
    t = replay.target
    before = threading.active_count()
    socks = []
    try:
        for _ in range(200):
            socks.append(socket.create_connection(("127.0.0.1", t.port), timeout=TIMEOUT))
        time.sleep(1.0)  # the server has accepted them by now
        t0 = time.monotonic()
        code, _, page = request(t, "GET", "/")
        assert code == 200 and page.startswith(b"<!doctype html>")
        assert time.monotonic() - t0 < 15
        still_answers(t)
        assert threading.active_count() - before < 40, threading.active_count() - before
        # and the server closes them after its idle timeout (10 s)
        deadline = time.monotonic() + 40
        for s in socks:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
    finally:
        for s in socks:
            s.close()
    still_answers(t)


def test_stalled_requests_use_a_bounded_number_of_threads(replay):
    t = replay.target
    before = threading.active_count()
    socks = []
    try:
        for _ in range(100):  # each sends half a request, then nothing: each takes a handler thread
            s = socket.create_connection(("127.0.0.1", t.port), timeout=TIMEOUT)
            s.sendall(f"GET /status?token={t.token} HTTP/1.1\r\nHost: {t.host}\r\n".encode())
            socks.append(s)
        time.sleep(1.5)
        assert threading.active_count() - before <= 40, threading.active_count() - before
        busy = []
        for s in socks:  # beyond the bound: answered 503 and closed at once
            s.settimeout(0.05)
            try:
                busy.append(s.recv(4096))
            except (socket.timeout, ConnectionResetError):
                pass
        assert sum(b.startswith(b"HTTP/1.1 503 ") for b in busy) >= 50, busy[:3]
        # the stalled ones time out (10 s of silence) and the page answers again
        def answers():
            try:
                return request(t, "GET", "/status")[0] == 200
            except OSError:  # refused while busy: the connection may be closed under the request
                return False

        until(answers, 40, "the viewer answering again")
    finally:
        for s in socks:
            s.close()
    still_answers(t)
