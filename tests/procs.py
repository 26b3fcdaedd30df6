"""Processes and places for fault-injection tests: start a program, read its lines with a
deadline, end it by pid; a directory of a chosen mode under /tmp; running as user nobody."""

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": ROOT}


def spawn(code: str, *args, user: list[str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([*(user or []), sys.executable, "-c", code, *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, cwd=ROOT)


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p is not None and p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        if p is not None:
            p.wait(timeout=30)


def tell(p: subprocess.Popen, line: str = "go") -> None:
    p.stdin.write(line + "\n")
    p.stdin.flush()


def line_with(p: subprocess.Popen, text: str, timeout: float = 60.0) -> str:
    """The first line of `p`'s output holding `text` (other lines are skipped)."""
    end = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        while time.monotonic() < end:
            if sel.select(timeout=min(1.0, end - time.monotonic())):
                line = p.stdout.readline()
                if not line:
                    break
                if text in line:
                    return line
    raise AssertionError(f"no line with {text!r} within {timeout} s (exit code {p.poll()})")


def records(p: subprocess.Popen, key: str, timeout: float) -> list[dict]:
    """`p`'s JSON lines up to and with the first holding `key` and an error (or `key` "close")."""
    out = []
    while True:
        rec = json.loads(line_with(p, "{", timeout))
        out.append(rec)
        if key in rec and (rec.get("error") or key == "close"):
            return out


@contextlib.contextmanager
def folder(mode: int):
    """A fresh directory under /tmp with `mode` (reachable by other users, unlike tmp_path)."""
    d = tempfile.mkdtemp(prefix="insitu-faults-", dir="/tmp")
    os.chmod(d, mode)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def other_user() -> list[str] | None:
    """A command prefix running a program as user nobody, or None."""
    if os.geteuid() != 0:
        return None
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    return None
