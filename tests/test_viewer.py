"""insitu.viewer: ``insitu view`` over live SST streams and BP5 replays, steering, the page in Chromium.

Writers and fake simulations run as separate processes (SST needs writer and reader in
different processes); they import :func:`pattern` / :func:`sim_image` from this file.
"""

import base64
import io
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
from PIL import Image

from insitu.stream import FrameWriter
from insitu.viewer import CAMERA_KEYS, COLORMAPS, STEER_KEYS, SteeringState, serve, validate_update

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")])}


def pattern(step, h=24, w=32):
    """A frame that tells its step: R = step % 256, G = step // 256, B = a column ramp."""
    img = np.empty((h, w, 4), np.uint8)
    img[..., 0], img[..., 1], img[..., 3] = step % 256, (step // 256) % 256, 255
    img[..., 2] = (np.arange(w) * 7 % 256)[None, :]
    return img


def sim_image(step, iso):
    """The fake simulation's frame: G tells the iso value it last received (x100)."""
    img = pattern(step)
    img[..., 1] = int(round(iso * 100)) % 256
    return img


WRITER = """
import sys, time
from test_viewer import pattern
from insitu.stream import FrameWriter
stream, n, fps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
pause_at = int(sys.argv[4]) if len(sys.argv) > 4 else -1  # then no frame until a line comes on stdin
hold_at = int(sys.argv[5]) if len(sys.argv) > 5 else -1  # the same, once more
w = FrameWriter(stream, "SST")
t0, worst = time.monotonic(), 0.0
for s in range(n):
    for at, word in ((pause_at, "pause"), (hold_at, "hold")):
        if s == at:
            print(word, flush=True)
            t = time.monotonic()
            sys.stdin.readline()
            t0 += time.monotonic() - t
    t = time.monotonic()
    w.write(pattern(s), step=s, time=s / fps)
    worst = max(worst, time.monotonic() - t)
    print("step", s, flush=True)
    time.sleep(max(0.0, t0 + (s + 1) / fps - time.monotonic()))
w.close()
print("done", worst, time.monotonic() - t0, flush=True)
"""

SIM = """
import json, sys, time
from test_viewer import sim_image
from insitu.stream import FrameWriter, SteeringReader, steering_name
stream, log, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
w, r = FrameWriter(stream, "SST"), SteeringReader(steering_name(stream))
iso, step, paused, t0 = 0.25, 0, False, time.monotonic()
with open(log, "w") as f:
    while time.monotonic() - t0 < limit:
        ups = r.poll()
        for u in ups:
            f.write(json.dumps(u) + "\\n")
            iso = u.get("iso_values", [iso])[0]
            paused = u.get("pause", paused)
        f.flush()
        if any(u.get("stop") for u in ups):
            print("stopped", flush=True)
            break
        if not paused:
            w.write(sim_image(step, iso), step=step, time=step * 0.1,
                    stats={"T": {"min": -step, "max": step, "mean": iso}})
            step += 1
        time.sleep(0.05)
r.close()
w.close()
"""


def _script(tmp_path, name, source):
    p = tmp_path / name
    p.write_text(source)
    return str(p)


class Proc:
    """A child process whose stdout lines are collected by a thread."""

    def __init__(self, args, **kw):
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                                  cwd=ROOT, errors="replace", **kw)
        self.lines, self.err = [], []
        threading.Thread(target=self._pump, args=(self.p.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.p.stderr, self.err), daemon=True).start()

    @staticmethod
    def _pump(f, out):
        for line in f:
            out.append(line.rstrip("\n"))

    def wait_line(self, prefix, timeout):
        deadline, exited = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            hit = next((x for x in list(self.lines) if x.startswith(prefix)), None)
            if hit is not None:
                return hit
            if self.p.poll() is not None:  # gone: give the pump a moment for its last lines
                exited = exited or time.monotonic()
                if time.monotonic() - exited > 0.5:
                    break
            time.sleep(0.05)
        raise AssertionError(f"no line {prefix!r} in time; {self.log()}")

    def finish(self, timeout=30):
        try:
            return self.p.wait(timeout)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()

    def log(self):
        return f"stdout {self.lines[-5:]}\nstderr {self.err[-15:]}"


def start_viewer(stream, *args):
    v = Proc([sys.executable, "-m", "insitu.cli", "view", stream, "--no-browser", "--port", "0", *args])
    line = v.wait_line("insitu view: serving ", 30)
    v.url = line.split()[3]  # with the viewer's token: http://127.0.0.1:PORT/?token=...
    assert v.url.startswith("http://127.0.0.1:") and "/?token=" in v.url and line.endswith(f" for {stream}")
    return v


def at(url, path):
    """`path` ("status", "frame.png?n=1", ...) of the viewer at `url`, keeping the token in its query."""
    u = urllib.parse.urlsplit(url)
    p, _, q = path.partition("?")
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + p, "&".join(x for x in (q, u.query) if x), ""))


def get(url, path):
    with urllib.request.urlopen(at(url, path), timeout=10) as r:
        return r.read(), r.headers


def status(url):
    return json.loads(get(url, "status")[0])


def frame(url):
    """(step, image) of the frame the viewer serves now."""
    data, h = get(url, "frame.png")
    return int(h["X-Insitu-Step"]), np.asarray(Image.open(io.BytesIO(data)))


def post(url, update, what="steer"):
    req = urllib.request.Request(at(url, what), json.dumps(update).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def tell(proc, line="go"):
    proc.p.stdin.write(line + "\n")
    proc.p.stdin.flush()


def quiet(url, seconds, timeout=30):
    """Waits until the viewer at `url` has received no frame for `seconds`: its reader has read
    what its SST queue held (SST's Discard policy drops new frames while that queue is full)."""
    last, since, end = None, time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < end:
        n = status(url)["frames"]
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return
        time.sleep(0.05)
    raise AssertionError(f"the viewer kept receiving frames for {timeout} s")


def stop_viewer(v, sig=signal.SIGTERM):
    v.p.send_signal(sig)
    assert v.finish(20) == 0, v.log()


# -- pure core --------------------------------------------------------------------------

def test_steering_state_merges_and_validates():
    s = SteeringState()
    s.update({"camera": {"azimuth": 30}, "iso_values": [0.5]})
    s.update({"camera": {"zoom": 2}, "params": {"k": 1}, "colormap": "plasma"})
    st = s.update({"params": {"j": 2.5}, "transfer_function": [[1, 0.5], [0, 0]], "pause": True})
    assert st == {"camera": {"azimuth": 30.0, "zoom": 2.0}, "iso_values": [0.5], "colormap": "plasma",
                  "params": {"k": 1.0, "j": 2.5}, "transfer_function": [[0.0, 0.0], [1.0, 0.5]], "pause": True}
    assert s.update({"iso_values": {"pl1": 0.3}})["iso_values"] == {"pl1": [0.3]}
    assert s.update({"iso_values": {"pl2": [1, 2]}})["iso_values"] == {"pl1": [0.3], "pl2": [1.0, 2.0]}
    assert s.update({"camera": {"azimuth": None}})["camera"] == {"azimuth": None, "zoom": 2.0}  # null: reset
    for bad, match in [({"isovalue": 1}, "unknown key.*'isovalue'.*known: camera, iso_values"),
                       ({"camera": {"roll": 1}}, r"camera: unknown key.*'roll'"),
                       ({"camera": {"zoom": 0}}, "camera/zoom: expected a positive number, got 0"),
                       ({"camera": {"up": [0, 1]}}, r"camera/up: expected a point"),
                       ({"iso_values": []}, "iso_values: expected a number or a non-empty list"),
                       ({"iso_values": ["a"]}, "iso_values"),
                       ({"colormap": "jet"}, "colormap: expected one of viridis"),
                       ({"transfer_function": [[0, 2]]}, r"transfer_function: expected .*alpha in \[0, 1\]"),
                       ({"params": {"k": True}}, "params/k: expected a number, got True"),
                       ({"pause": 1}, "pause: expected true or false"),
                       ([1], "expected a JSON object")]:
        with pytest.raises(ValueError, match=match):
            validate_update(bad)
    assert s.version == 6  # failed updates change nothing


def test_series_keeps_each_frames_values_and_counts_the_frames_lost_on_the_way():
    from insitu.stream import Frame
    from insitu.viewer import Series

    s, img = Series(history=4), np.zeros((1, 1, 4), np.uint8)
    # frame numbers 0, 1, 4, 5, 9 (2 + 3 lost), then 2: a new writer (no gap counted), then 3
    for i, n in enumerate([0, 1, 4, 5, 9, 2, 3]):
        s.add(Frame(i, 0.5 * i, img, stats={"T": {"min": -i, "max": float("inf")}}, timings={"draw": 0.001},
                    frame_number=n))
    assert s.dropped == 5 and s.count == 7
    got = s.since(0)
    assert got["start"] == 3 and got["count"] == 7 and [p["step"] for p in got["points"]] == [3, 4, 5, 6]
    assert got["points"][0] == {"step": 3, "time": 1.5, "stats": {"T": {"min": -3.0, "max": None}},
                                "timings": {"draw": 0.001}}  # JSON has no infinity
    assert s.since(6)["points"][0]["step"] == 6 and s.since(99) == {"start": 7, "points": [], "count": 7}


def test_steering_keys_match_the_renderers_and_the_adaptor():
    from adaptors import STEERABLE
    from adaptors.config import SCHEMA
    from render.colormap import NAMES

    assert tuple(COLORMAPS) == tuple(NAMES)  # declared by the renderers (entry points), not copied
    assert set(CAMERA_KEYS) == set(SCHEMA["camera"])
    assert set(STEER_KEYS) == set(STEERABLE)


def test_without_a_renderer_any_colormap_name_is_passed_on(monkeypatch):
    from insitu import plugins
    from insitu.viewer import state

    monkeypatch.setattr(plugins, "_groups", {state.COLORMAP_GROUP: {}})
    monkeypatch.setattr(state, "COLORMAPS", state._Colormaps())
    assert len(state.COLORMAPS) == 0
    # the simulation's configuration schema judges the name (and reports a refusal by results())
    assert validate_update({"colormap": "jet"}) == {"colormap": "jet"}
    for bad in ("", "two words", "x" * 65, ["viridis"], 3, "<script>"):
        with pytest.raises(ValueError, match="colormap: expected a colormap name"):
            validate_update({"colormap": bad})


# -- BP5 replay -------------------------------------------------------------------------

def test_bp5_replay_serves_all_steps_in_order_and_records(tmp_path):
    from insitu.cli import main

    bp, n = str(tmp_path / "frames.bp"), 12
    with FrameWriter(bp, "BP5") as w:
        for s in range(n):
            w.write(pattern(s, 31, 45), step=s, time=0.5 * s, ranges={"T": (0.0, float(s))},
                    stats={"T": {"min": -s, "max": 2 * s, "mean": 0.5}})
    v = serve(bp, png=str(tmp_path / "png"), mp4=str(tmp_path / "movie.mp4"), rate=40)
    try:
        assert v.wait(20)
        st = status(v.url)
        assert st["mode"] == "replay" and st["ended"] and st["error"] is None and st["record_error"] is None
        assert st["steps"] == list(range(n)) and st["frames"] == n and st["step"] == n - 1
        assert (st["width"], st["height"], st["time"], st["ranges"]) == (45, 31, 5.5, {"T": [0.0, 11.0]})
        assert st["replay"] == {"position": n - 1, "count": n, "playing": False, "complete": True, "rate": 40.0}
        assert st["stats"] == {"T": {"min": -11.0, "max": 22.0, "mean": 0.5}} and st["dropped"] == 0
        step, img = frame(v.url)  # the last frame stays served after the end
        assert step == n - 1 and np.array_equal(img, pattern(n - 1, 31, 45))
        series = json.loads(get(v.url, "series?since=10")[0])
        assert series["start"] == 10 and series["count"] == n
        assert [(p["step"], p["stats"]["T"]["max"]) for p in series["points"]] == [(10, 20.0), (11, 22.0)]
        # the timeline: seek by step, then frame by frame; the frame served is that step's
        for command, want in [({"step": 4}, 4), ({"delta": -1}, 3), ({"delta": 2}, 5), ({"position": 9}, 9),
                              ({"delta": 99}, n - 1), ({"step": -5}, 0)]:
            code, body = post(v.url, command, "replay")
            assert code == 200 and body["position"] == want and not body["playing"], (command, body)
            until(lambda: frame(v.url)[0] == want, 10, f"frame {want} after {command}")
            assert np.array_equal(frame(v.url)[1], pattern(want, 31, 45))
        for bad, match in [({"seek": 1}, "replay: expected one of"), ({"position": n}, "position: expected 0 .. 11"),
                           ({"step": 1.5}, "step: expected an integer"), ({"play": "yes"}, "play: expected true")]:
            code, body = post(v.url, bad, "replay")
            assert code == 400 and match in body["error"], body
        assert not st["steering"]["enabled"]
        from render.colormap import NAMES

        assert st["colormaps"] == list(NAMES)  # what the page offers
        code, body = post(v.url, {"iso_values": [1.0]})
        assert code == 409 and "steering is off" in body["error"]
        page, h = get(v.url, "")
        assert h["Content-Type"].startswith("text/html") and b'id="iso-apply"' in page and b"http" not in page
    finally:
        v.close()
    for s in range(n):
        assert np.array_equal(np.asarray(Image.open(tmp_path / "png" / f"frame_{s:06d}.png")), pattern(s, 31, 45))
    data = (tmp_path / "movie.mp4").read_bytes()
    assert data[4:8] == b"ftyp"
    import imageio_ffmpeg

    frames = imageio_ffmpeg.read_frames(str(tmp_path / "movie.mp4"))
    meta = next(frames)
    assert tuple(meta["size"]) == (46, 32)  # padded to even sizes
    assert sum(1 for _ in frames) == n
    # the command line: --exit-at-end returns once the replay is over
    assert main(["view", bp, "--no-browser", "--exit-at-end", "--rate", "100", "--png", str(tmp_path / "cli")]) == 0
    assert len(os.listdir(tmp_path / "cli")) == n


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="BP5 file .* is not a directory"):
        serve(str(tmp_path / "nothing.bp"), engine="BP5")
    with pytest.raises(ValueError, match="rate: expected frames per second > 0"):
        serve(str(tmp_path), rate=0)
    with pytest.raises(ValueError, match="steering needs a live SST stream"):
        serve(str(tmp_path), steer=True)
    p = subprocess.run([sys.executable, "-m", "insitu.cli", "view", "s", "--timeout", "-1"],
                       capture_output=True, text=True, env=ENV)
    assert p.returncode == 2 and "--timeout: expected a number > 0" in p.stderr


def test_no_writer_exits_with_an_error(tmp_path):
    stream = str(tmp_path / "not" / "yet")
    v = start_viewer(stream, "--timeout", "1")
    assert v.finish(30) == 1
    assert any(f"no writer for SST stream {stream!r} within 1 s" in e for e in v.err), v.log()
    assert not any("\x1b[" in e for e in v.err)


# -- live SST ---------------------------------------------------------------------------

def test_live_stream_is_shown_and_recorded(tmp_path):
    stream, png = str(tmp_path / "frames"), tmp_path / "png"
    v = start_viewer(stream, "--png", str(png))
    time.sleep(1.5)  # the viewer waits for the writer: its page and status still answer at once
    t = time.monotonic()
    st = status(v.url)
    assert time.monotonic() - t < 0.5 and (st["frames"], st["ended"], st["connected"]) == (0, False, False)
    assert get(v.url, "")[0].startswith(b"<!doctype html>")
    w = Proc([sys.executable, _script(tmp_path, "writer.py", WRITER), stream, "80", "25", "50", "79"],
             stdin=subprocess.PIPE)
    try:
        until(lambda: status(v.url)["frames"] >= 5, 30, "frames")
        seen = [status(v.url)["step"]]
        until(lambda: seen.append(status(v.url)["step"]) or seen[-1] >= seen[0] + 5, 10, "later steps")
        assert seen == sorted(seen)
        step, img = frame(v.url)
        assert step >= seen[0] and np.array_equal(img, pattern(step))
        st = status(v.url)
        assert st["mode"] == "live" and st["connected"] and st["fps"] > 5 and not st["ended"]
        assert st["steps"] == sorted(st["steps"])
        w.wait_line("pause", 30)
        # a writer that pauses has not ended: no frame for the rate's window (2 s), still connected
        st = until(lambda: (s := status(v.url))["fps"] == 0 and s, 30, "no frames while the writer pauses")
        assert not st["ended"] and st["connected"]
        tell(w)
        # before its last frame the writer waits until the viewer has read what it was sent: a
        # viewer held up by a loaded machine would otherwise miss it (SST drops new frames while
        # the viewer's queue is full)
        w.wait_line("hold", 30)
        quiet(v.url, 1.0)
        tell(w)
        assert w.finish(60) == 0, w.log()
        st = until(lambda: (s := status(v.url))["ended"] and s, 10, "the end of the stream")
        assert st["error"] is None and st["step"] == 79
        # the writer wrote every step: the frames that did not come are the dropped ones
        assert st["dropped"] == 80 - st["first_step"] - st["received"] and st["replay"] is None
        step, img = frame(v.url)  # still serving the last frame
        assert step == 79 and np.array_equal(img, pattern(79))
        files = sorted(os.listdir(png))
        assert len(files) == st["frames"] >= 20
        for name in files:
            s = int(name[6:12])
            assert np.array_equal(np.asarray(Image.open(png / name)), pattern(s)), name
    finally:
        w.finish(5)
        stop_viewer(v, signal.SIGINT)  # Ctrl-C: a clean exit too (not ADIOS2's own SIGINT handler)
    assert any(" ended after " in line for line in v.lines)


def test_late_viewer_gets_recent_frames_and_a_killed_viewer_does_not_disturb_the_writer(tmp_path):
    stream, n, fps = str(tmp_path / "frames"), 150, 25
    w = Proc([sys.executable, _script(tmp_path, "writer.py", WRITER), stream, str(n), str(fps)])
    try:
        w.wait_line("step 40", 30)
        v = start_viewer(stream, "--no-steer")
        until(lambda: status(v.url)["frames"] >= 3, 30, "a first frame")
        first = status(v.url)["first_step"]
        assert first >= 40, first
        step, img = frame(v.url)
        assert np.array_equal(img, pattern(step))
        at_kill = int(w.lines[-1].split()[1])
        v.p.send_signal(signal.SIGKILL)
        v.finish(10)
        assert w.finish(60) == 0, w.log()
        done = w.lines[-1].split()
        assert done[0] == "done" and at_kill < n - 20, w.log()
        worst, total = float(done[1]), float(done[2])
        assert worst < 0.5 and total < n / fps + 3, (worst, total)
        assert [int(x.split()[1]) for x in w.lines[:-1]] == list(range(n))
    finally:
        w.finish(5)


# -- steering ---------------------------------------------------------------------------

def _sim(tmp_path, stream, limit=60):
    log = tmp_path / "sim.log"
    sim = Proc([sys.executable, _script(tmp_path, "sim.py", SIM), stream, str(log), str(limit)])
    return sim, log


def _updates(log):
    try:
        return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


def _served_iso(url):
    return int(frame(url)[1][0, 0, 1])


def test_steering_reaches_the_simulation_and_changes_its_frames(tmp_path):
    stream = str(tmp_path / "frames")
    v = start_viewer(stream)
    sim, log = _sim(tmp_path, stream)
    try:
        until(lambda: status(v.url)["frames"] >= 1, 30, "a first frame")
        assert _served_iso(v.url) == 25
        code, body = post(v.url, {"iso_values": [0.7], "camera": {"azimuth": 30}})
        assert code == 200 and body["state"] == {"iso_values": [0.7], "camera": {"azimuth": 30.0}}
        until(lambda: _served_iso(v.url) == 70, 20, "a frame made with iso 0.7")
        code, body = post(v.url, {"camera": {"zoom": 2}})
        assert body["state"]["camera"] == {"azimuth": 30.0, "zoom": 2.0}
        # heartbeat: the whole state again every second, with no change
        n0 = len(_updates(log))
        until(lambda: len(_updates(log)) >= n0 + 2, 10, "heartbeats")
        assert _updates(log)[-1] == {"iso_values": [0.7], "camera": {"azimuth": 30.0, "zoom": 2.0}}
        for bad, match in [({"isovalue": 1}, "unknown key"), ({"camera": {"zoom": -1}}, "camera/zoom"),
                           ({"colormap": "jet"}, "colormap: expected one of")]:
            code, body = post(v.url, bad)
            assert code == 400 and match in body["error"], body
        assert json.loads(get(v.url, "steer")[0])["state"]["camera"]["zoom"] == 2.0
        assert status(v.url)["steering"]["sent"] >= 3
        code, _ = post(v.url, {"stop": True})
        assert code == 200
        assert sim.finish(20) == 0, sim.log()
        assert "stopped" in sim.lines
        until(lambda: status(v.url)["ended"], 10, "the end of the stream")
        assert _served_iso(v.url) == 70  # the last frame stays
    finally:
        sim.finish(5)
        stop_viewer(v)


# -- the page in a headless Chromium ----------------------------------------------------

class DevTools:
    """A minimal Chrome DevTools Protocol client over a websocket (RFC 6455), standard library only."""

    def __init__(self, ws_url, timeout=20):
        u = urllib.parse.urlsplit(ws_url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.id = 0

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("devtools closed the websocket")
            buf += chunk
        return buf

    def _send(self, text):
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        head = struct.pack("!B", 0x81) + (struct.pack("!B", 0x80 | n) if n < 126 else
                                          struct.pack("!BH", 0x80 | 126, n) if n < 65536 else
                                          struct.pack("!BQ", 0x80 | 127, n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _recv(self):
        msg = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            if b0 & 0x0F == 8:
                raise ConnectionError("devtools closed the websocket")
            if b0 & 0x0F in (0, 1, 2):
                msg += payload
                if b0 & 0x80:
                    return json.loads(msg)

    def call(self, method, **params):
        self.id += 1
        self._send(json.dumps({"id": self.id, "method": method, "params": params}))
        while True:
            m = self._recv()
            if m.get("id") == self.id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self):
        self.sock.close()


# what the page shows: its <img>'s size and the G channel of a pixel (the frame's iso value x100)
SHOWN = """(() => { const i = document.getElementById('frame');
  if (!i || !i.naturalWidth) return null;
  const c = document.createElement('canvas'); c.width = i.naturalWidth; c.height = i.naturalHeight;
  const g = c.getContext('2d'); g.drawImage(i, 0, 0);
  return [i.naturalWidth, i.naturalHeight, g.getImageData(1, 1, 1, 1).data[1], +i.dataset.step]; })()"""


def annotated(step, h=240, w=320):
    """A replay's frame: R = step, a viridis legend for T in [0, step + 1], the step written in."""
    from render.annotate import annotate
    from render.image import to_uint8

    a = np.zeros((h, w, 4), np.float32)
    a[..., 0], a[..., 2], a[..., 3] = step / 255, 0.2, 1.0
    annotate(a, field="T", lo=0.0, hi=step + 1.0, colormap="viridis", step=step, time=0.1 * step, fg=(1, 1, 1))
    return to_uint8(a)


def legend_in_screenshot(cdp, h=240, w=320):
    """The fraction of the legend bar's rows whose colour, in a screenshot of the page, is
    the colormap's at that row (within 2 of 255), read at the bar's middle column."""
    from render.annotate import bar_positions, layout
    from render.colormap import colormap

    left, top, width, height = cdp.eval("(() => { const r = document.getElementById('frame').getBoundingClientRect();"
                                        " return [r.left, r.top, r.width, r.height]; })()")
    assert (width, height) == (w, h)  # shown at its size: pixels as sent
    png = base64.b64decode(cdp.call("Page.captureScreenshot", format="png")["data"])
    shot = np.asarray(Image.open(io.BytesIO(png)))
    x, y, bw, bh = layout(h, w).bar
    want = np.round(np.asarray(colormap("viridis", bar_positions(bh), 0.0, 1.0))[:, :3] * 255)
    got = shot[round(top) + y:round(top) + y + bh, round(left) + x + bw // 2, :3].astype(float)
    return float((np.abs(got - want).max(axis=1) <= 2).mean())


# the step the page shows: its <img>'s data-step and the R channel of a pixel (the frame's step)
SHOWN_STEP = """(() => { const i = document.getElementById('frame');
  if (!i || !i.naturalWidth) return null;
  const c = document.createElement('canvas'); c.width = i.naturalWidth; c.height = i.naturalHeight;
  const g = c.getContext('2d'); g.drawImage(i, 0, 0);
  return [+i.dataset.step, g.getImageData(1, 1, 1, 1).data[0]]; })()"""


def test_page_in_headless_chromium_shows_frames_and_steers(tmp_path):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("needs the Debian package 'chromium' (scripts/ensure-system.sh installs it as root)")
    stream, prof = str(tmp_path / "frames"), tmp_path / "chrome"
    v = start_viewer(stream)
    sim, log = _sim(tmp_path, stream)
    chrome = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                               "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                               f"--user-data-dir={prof}", "--remote-debugging-port=0", v.url],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    cdp = None
    try:
        port = until(lambda: (prof / "DevToolsActivePort").exists()
                     and (prof / "DevToolsActivePort").read_text().split("\n")[0], 30, "chromium's devtools")
        pages = until(lambda: [t for t in json.loads(get(f"http://127.0.0.1:{port}/", "json/list")[0])
                               if t["type"] == "page" and t["url"].startswith(v.url)], 20, "the page")
        cdp = DevTools(pages[0]["webSocketDebuggerUrl"])
        w, h, g, _ = until(lambda: cdp.eval(SHOWN), 30, "the page showing a frame")
        assert (w, h, g) == (32, 24, 25)
        assert cdp.eval("getComputedStyle(document.getElementById('wait')).display") == "none"
        # the inline style is allowed by the page's Content-Security-Policy (the script is: it shows frames)
        assert cdp.eval("getComputedStyle(document.body).backgroundColor") == "rgb(22, 24, 28)"
        assert cdp.eval("document.getElementById('steer').disabled") is False
        from render.colormap import NAMES

        # the colormaps offered are those in the viewer's status (the page has no list of its own)
        assert cdp.eval("[...document.getElementById('colormap').options].map(o => o.value)") == ["", *NAMES]
        cdp.eval("const c = document.getElementById('colormap'); c.value = 'magma';"
                 "c.dispatchEvent(new Event('change'))")
        until(lambda: any(u.get("colormap") == "magma" for u in _updates(log)), 20, "the colormap at the simulation")
        cdp.eval("document.getElementById('iso').value = '0.55'; document.getElementById('iso-apply').click()")
        until(lambda: any(u.get("iso_values") == [0.55] for u in _updates(log)), 20, "the update at the simulation")
        until(lambda: _served_iso(v.url) == 55, 20, "a served frame made with iso 0.55")
        until(lambda: (cdp.eval(SHOWN) or [0, 0, 0])[2] == 55, 20, "the page showing it")
        cdp.eval("document.getElementById('az-plus').click()")
        until(lambda: _updates(log)[-1].get("camera", {}).get("azimuth") == 15.0, 20, "an orbit update")
        assert _updates(log)[-1]["iso_values"] == [0.55]  # the whole state each time
        assert "sent" in cdp.eval("document.getElementById('msg').textContent")
        # the plot of the frames' values grows as frames come; live: frames dropped shown, no timeline
        points = "+document.getElementById('plot').dataset.points || 0"
        n = until(lambda: cdp.eval(points), 20, "the plot")
        until(lambda: cdp.eval(points) > n, 20, "the plot growing")
        assert cdp.eval("document.getElementById('plot').querySelectorAll('polyline').length") == 3  # min, mean, max
        assert cdp.eval("document.getElementById('dropped-box').hidden") is False
        assert cdp.eval("document.getElementById('dropped').textContent") == str(status(v.url)["dropped"])
        assert cdp.eval("document.getElementById('timeline').hidden") is True

        # a BP5 replay: the legend drawn into the frames is on the screen; the timeline seeks
        bp = str(tmp_path / "replay.bp")
        with FrameWriter(bp, "BP5") as fw:
            for s in range(0, 40, 5):
                fw.write(annotated(s), step=s, time=0.1 * s, ranges={"T": (0.0, s + 1.0)},
                         stats={"T": {"min": -s, "max": s + 1.0, "mean": 0.5}})
        replay = serve(bp, rate=40)
        try:
            cdp.call("Page.navigate", url=replay.url)
            until(lambda: cdp.eval("status && status.replay && !status.replay.playing && status.ended")
                  and cdp.eval(SHOWN_STEP) == [35, 35], 20, "the replay played to its end")
            assert legend_in_screenshot(cdp) > 0.95
            until(lambda: cdp.eval(points) == 3 * 8, 10, "the replay's plot")
            cdp.eval("const s = document.getElementById('seek'); s.value = 3; s.dispatchEvent(new Event('input'));"
                     "s.dispatchEvent(new Event('change'))")
            until(lambda: cdp.eval(SHOWN_STEP) == [15, 15], 10, "the frame of position 3 (step 15)")
            assert "step 15" in cdp.eval("document.getElementById('where').textContent")
            assert cdp.eval("document.getElementById('plot-cursor').getAttribute('x1')") is not None
            cdp.eval("document.getElementById('next').click()")
            until(lambda: cdp.eval(SHOWN_STEP) == [20, 20], 10, "the next frame")
            cdp.eval("document.getElementById('jump').value = '7'; document.getElementById('jump-go').click()")
            until(lambda: cdp.eval(SHOWN_STEP) == [5, 5], 10, "the frame of step 5 (none is 7: the one before)")
            assert replay.status()["replay"]["position"] == 1
        finally:
            replay.close()
    finally:
        if cdp is not None:
            cdp.close()
        os.killpg(chrome.pid, signal.SIGKILL)
        chrome.wait()
        post(v.url, {"stop": True})
        sim.finish(20)
        stop_viewer(v)
