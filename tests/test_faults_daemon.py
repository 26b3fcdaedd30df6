"""Fault injection on worker daemons: orphans, stale or foreign daemons, forged frames, a
full listen backlog, a planted kernel cache, spill directories of killed daemons.

Every process a test starts is ended by pid in a ``finally``; every wait is bounded.
"""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from insitu.pool import GPUBlocks, handoff
from insitu.pool._proc import host_tag, pid_alive
from insitu.pool.cache import BlockCache
from insitu.pool.client import DaemonOwnerError, MessageTooLargeError
from insitu.pool.daemon import (DaemonStartError, DaemonWorker, WorkerTimeoutError, default_socket_path, ensure_daemon,
                                start_daemon)
from insitu.pool.kernels import KernelCache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOBODY = 65534
PLATFORM = ("14.0.0", "90", "12.8")


def _short_dir() -> str:
    """A short directory for sockets (Unix socket paths hold at most 107 bytes)."""
    return tempfile.mkdtemp(prefix="isf-", dir="/tmp")


def _wait(pred, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def _kill(pid: int | None) -> None:
    """SIGKILL `pid` if it still runs (test cleanup; our own children are reaped by Popen)."""
    if pid is not None and pid_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait(lambda: not pid_alive(pid), 10)


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.fixture
def sockdir():
    d = _short_dir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


# -- orphans: the starter is killed --------------------------------------------------------------

STARTER = """
import sys, time
from insitu.pool.daemon import ensure_daemon
h = ensure_daemon(None, directory=sys.argv[1], idle_timeout=float(sys.argv[2]), spill_dir=sys.argv[3],
                  budget_bytes=0, host_budget_bytes=0, timeout=60)
print(h.pid, flush=True)
time.sleep(600)
"""


def test_daemon_exits_within_its_idle_timeout_after_its_starter_is_killed(sockdir, tmp_path):
    idle = 2.0
    spill = str(tmp_path / "spill")
    starter = subprocess.Popen([sys.executable, "-c", STARTER, sockdir, str(idle), spill], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    daemon_pid = None
    try:
        line = starter.stdout.readline()
        assert line.strip().isdigit(), starter.stderr.read() if starter.poll() is not None else line
        daemon_pid = int(line)
        path = default_socket_path(None, directory=sockdir)
        with DaemonWorker(path, timeout=30) as w:
            assert w.stats().owners == (starter.pid,)  # its starter keeps it; this client does not
            # A block spilled to disk: the exit must remove its file too.
            GPUBlocks.from_arrays(w, {0: np.arange(1000.0)}).send_gpu().cache_gpu()
        [blocks] = os.listdir(spill)
        assert os.listdir(os.path.join(spill, blocks))
        time.sleep(3 * idle)  # idle, but its owner lives: it stays
        assert pid_alive(daemon_pid)
        starter.kill()  # SIGKILL: the simulation is gone without a word
        starter.wait(10)
        t0 = time.monotonic()
        assert _wait(lambda: not pid_alive(daemon_pid), 30), "the orphaned daemon did not exit"
        assert time.monotonic() - t0 < idle + 20
        assert not os.path.exists(path)  # its socket is removed,
        assert os.listdir(spill) == []  # and its spilled blocks
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(10)
        _kill(daemon_pid)


def test_an_open_connection_keeps_an_ownerless_daemon(sockdir):
    # Its starter exits at once (normally): the daemon has no owner left.
    script = ("import sys; from insitu.pool.daemon import start_daemon;"
              "print(start_daemon(None, sys.argv[1], idle_timeout=1.0, timeout=60).pid, flush=True)")
    path = os.path.join(sockdir, "o.sock")
    p = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=90,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout)
    try:
        with DaemonWorker(path, timeout=30) as w:
            assert w.stats().owners == ()
            time.sleep(4.0)  # ownerless and idle past its timeout, but a connection is open: it stays
            assert w.ping() == pid
        assert _wait(lambda: not pid_alive(pid), 30)  # the connection closed: it goes
        assert not os.path.exists(path)
    finally:
        _kill(pid)


# -- fingerprints: other options, another checkout --------------------------------------------


def test_ensure_daemon_replaces_a_daemon_with_other_options(sockdir):
    path = default_socket_path(None, directory=sockdir)
    old = start_daemon(None, path, budget_bytes=1 << 20, timeout=60)
    new = None
    try:
        with pytest.warns(RuntimeWarning, match=r"budget_bytes: 1048576 there, 2097152 here"):
            new = ensure_daemon(None, directory=sockdir, budget_bytes=2 << 20, timeout=60)
        assert new.pid != old.pid
        assert _wait(lambda: not old.alive(), 30)
        assert new.client().stats().cache.budget_bytes == 2 << 20  # the new one has the new budget
        again = ensure_daemon(None, directory=sockdir, budget_bytes=2 << 20, timeout=60)  # same options: reused
        assert again.pid == new.pid
    finally:
        old.stop(timeout=5)
        if new is not None:
            new.stop(timeout=5)


def test_ensure_daemon_does_not_stop_a_differing_daemon_in_use(sockdir):
    path = default_socket_path(None, directory=sockdir)
    old = start_daemon(None, path, budget_bytes=1 << 20, timeout=60)
    try:
        with old.client(timeout=30) as w:
            w.ping()  # a job holds a connection to it
            with pytest.raises(DaemonStartError, match=r"(?s)budget_bytes: 1048576 there, None here.*is in use "
                                                       r"\(1 connections"):
                ensure_daemon(None, directory=sockdir, timeout=60)
            assert w.ping() == old.pid and old.alive()  # untouched
    finally:
        old.stop(timeout=5)


FOREIGN = """
import sys
from insitu.pool.daemon import start_daemon
import insitu
assert insitu.__file__.startswith(sys.argv[2]), insitu.__file__
h = start_daemon(None, sys.argv[1], timeout=60)
print(h.pid, flush=True)
"""


def test_a_daemon_from_another_checkout_is_not_reused(sockdir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(os.path.join(ROOT, "insitu"), other / "insitu", ignore=shutil.ignore_patterns("__pycache__"))
    path = default_socket_path(None, directory=sockdir)
    p = subprocess.run([sys.executable, "-c", FOREIGN, path, str(other)], capture_output=True, text=True, timeout=90,
                       cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=str(other)))
    assert p.returncode == 0, p.stderr
    foreign = int(p.stdout)
    mine = None
    try:
        assert DaemonWorker(path, timeout=30).ping() == foreign
        with pytest.warns(RuntimeWarning, match=rf"checkout: '{other}' there, '{ROOT}' here"):
            mine = ensure_daemon(None, directory=sockdir, timeout=60)
        assert mine.pid != foreign
        assert _wait(lambda: not pid_alive(foreign), 30)
        assert mine.client().ping() == mine.pid
    finally:
        _kill(foreign)
        if mine is not None:
            mine.stop(timeout=5)


def test_a_daemon_of_another_user_is_refused(sockdir):
    if os.getuid() != 0:
        pytest.skip("needs root to run a listener as another user (nobody)")
    d = os.path.join(sockdir, "theirs")
    os.mkdir(d)
    os.chown(d, NOBODY, NOBODY)
    os.chmod(sockdir, 0o755)
    path = os.path.join(d, "w.sock")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a listener of user nobody (no exec: nobody may not reach this Python)
        try:
            os.close(r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            s.listen(8)
            os.write(w, b"up")
            time.sleep(120)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 2) == b"up"
        with pytest.raises(DaemonOwnerError, match=rf"belongs to uid {NOBODY}, not to this user"):
            DaemonWorker(path, timeout=10).ping()
    finally:
        os.close(r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# -- forged frames -------------------------------------------------------------------------------


@pytest.fixture
def daemon(sockdir):
    h = start_daemon(None, os.path.join(sockdir, "w.sock"), max_message_bytes=1 << 24, timeout=60)
    yield h
    h.stop(timeout=5)
    _kill(h.pid)


def _forge(path: str, header: bytes):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    try:
        s.connect(path)
        s.sendall(header)
        return handoff.loads(handoff.recv_frames(s))
    finally:
        s.close()


@pytest.mark.parametrize("header, limit", [
    (struct.pack("!QI", 16, 2 ** 31), "65536"),  # 2^31 buffer lengths: 16 GiB of zeros once
    (struct.pack("!QI", 2 ** 40, 0), "16777216 B"),  # a 1 TiB pickle
    (struct.pack("!QI", 16, 2) + struct.pack("!Q", 1 << 23) + struct.pack("!Q", 1 << 23), "16777216 B"),
])
def test_a_forged_header_is_refused_without_allocating(daemon, header, limit):
    msg = _forge(daemon.socket_path, header)
    assert msg[0] == "error" and msg[3] == "MessageTooLargeError", msg[:5]
    assert "limit" in msg[4] and limit in msg[4], msg[4]
    assert daemon.client(timeout=30).ping() == daemon.pid  # it still answers
    assert _rss_bytes(daemon.pid) < 1 << 30  # and did not fill memory


def test_a_message_announcing_more_than_it_sends_costs_only_what_arrived(sockdir):
    h = start_daemon(None, os.path.join(sockdir, "big.sock"), max_message_bytes=4 << 30, timeout=60)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    try:
        before = _rss_bytes(h.pid)
        s.connect(h.socket_path)
        # Within the limit: 2 GiB announced, 100 bytes sent; the rest never comes.
        s.sendall(struct.pack("!QI", 16, 1) + struct.pack("!Q", 2 << 30) + b"x" * 100)
        assert h.client(timeout=30).ping() == h.pid  # other connections are served meanwhile
        time.sleep(0.5)
        assert _rss_bytes(h.pid) - before < 256 << 20  # the 2 GiB were not allocated up front
    finally:
        s.close()
        h.stop(timeout=5)
        _kill(h.pid)


def test_a_client_refuses_to_send_more_than_its_limit(daemon):
    w = DaemonWorker(daemon.socket_path, timeout=30, max_message_bytes=1 << 12)
    with pytest.raises(MessageTooLargeError, match=r"exceeds the limit of 4096 B"):
        GPUBlocks.from_arrays(w, {0: np.zeros(10_000)}).send_gpu().recv_gpu()
    assert w.round_trips == 0  # nothing went out
    assert w.ping() == daemon.pid


# -- a full listen backlog ----------------------------------------------------------------------


def test_a_full_listen_backlog_gives_worker_timeout_error(sockdir):
    path = os.path.join(sockdir, "full.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)  # and never accepts
    pending = []
    try:
        for _ in range(64):  # fill the backlog
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(path)
            except BlockingIOError:
                c.close()
                break
            pending.append(c)
        else:
            pytest.fail("the backlog never filled")
        t0 = time.monotonic()
        with pytest.raises(WorkerTimeoutError, match=rf"backlog stayed full \(socket {path}"):
            DaemonWorker(path, timeout=1.0).ping()
        assert time.monotonic() - t0 < 30
        with pytest.raises(DaemonStartError, match="accepts no connection"):
            start_daemon(None, path, timeout=30)
    finally:
        for c in pending:
            c.close()
        listener.close()


# -- the kernel cache -----------------------------------------------------------------------------


def _entry(tmp_path) -> tuple[KernelCache, str, dict]:
    cache = KernelCache(str(tmp_path / "k"))
    key = "f" * 64
    assert cache._store(key, b"\x7fELF planted?", {}, platform=PLATFORM)
    meta = json.loads((tmp_path / "k" / f"{key}.json").read_text())
    assert KernelCache(cache.cache_dir)._fetch(key, PLATFORM) is not None  # trusted as made
    return cache, key, meta


@pytest.mark.parametrize("what", ["meta", "binary"])
def test_kernel_cache_files_of_another_user_are_ignored(tmp_path, what):
    if os.getuid() != 0:
        pytest.skip("needs root to give a file to another user (nobody)")
    cache, key, meta = _entry(tmp_path)
    os.chown(tmp_path / "k" / (f"{key}.json" if what == "meta" else meta["binary"]), NOBODY, NOBODY)
    with pytest.warns(RuntimeWarning, match=rf"belongs to uid {NOBODY}"):
        assert KernelCache(cache.cache_dir)._fetch(key, PLATFORM) is None


def test_kernel_cache_directory_of_another_user_is_ignored(tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root to give a directory to another user (nobody)")
    cache, key, _ = _entry(tmp_path)
    os.chown(cache.cache_dir, NOBODY, NOBODY)
    c = KernelCache(cache.cache_dir)
    with pytest.warns(RuntimeWarning, match=rf"belongs to uid {NOBODY}"):
        assert c._fetch(key, PLATFORM) is None
    assert not c._store("e" * 64, b"\x7fELF", {}, platform=PLATFORM)  # nor written into


@pytest.mark.parametrize("what", ["dir", "meta", "binary"])
def test_kernel_cache_writable_by_others_is_ignored(tmp_path, what):
    cache, key, meta = _entry(tmp_path)
    target = {"dir": tmp_path / "k", "meta": tmp_path / "k" / f"{key}.json",
              "binary": tmp_path / "k" / meta["binary"]}[what]
    os.chmod(target, os.stat(target).st_mode | 0o002)
    with pytest.warns(RuntimeWarning, match=r"others than its owner may write to it"):
        assert KernelCache(cache.cache_dir)._fetch(key, PLATFORM) is None


def test_kernel_cache_symlinked_entry_is_ignored(tmp_path):
    cache, key, meta = _entry(tmp_path)
    elsewhere = tmp_path / "planted.cubin"
    shutil.move(tmp_path / "k" / meta["binary"], elsewhere)
    os.symlink(elsewhere, tmp_path / "k" / meta["binary"])
    assert KernelCache(cache.cache_dir)._fetch(key, PLATFORM) is None


def test_kernel_cache_directory_is_made_private(tmp_path):
    cache = KernelCache(str(tmp_path / "new" / "k"))
    old = os.umask(0o002)
    try:
        assert cache._store("d" * 64, b"\x7fELF", {}, platform=PLATFORM)
    finally:
        os.umask(old)
    assert os.stat(cache.cache_dir).st_mode & 0o077 == 0


# -- spill directories of killed daemons ------------------------------------------------------


def _dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                       timeout=60)
    pid = int(p.stdout)
    assert not pid_alive(pid)
    return pid


def test_stale_spill_dirs_of_dead_processes_are_removed_at_daemon_start(sockdir, tmp_path):
    spill = tmp_path / "spill"
    spill.mkdir()
    dead, me, host = _dead_pid(), os.getpid(), host_tag()

    def make(name, files=("block-1-0.h5",)):
        d = spill / name
        d.mkdir()
        for f in files:
            (d / f).write_bytes(b"\x89HDF")
        return d

    stale = make(f"insitu-blocks-{host}-{dead}-abc123")
    empty = make(f"insitu-blocks-{host}-{dead}-def456", files=())
    live = make(f"insitu-blocks-{host}-{me}-abc123")  # its process runs
    other_host = make(f"insitu-blocks-otherhost-{dead}-abc123")  # another node's (shared file system)
    not_ours = make(f"insitu-blocks-{host}-{dead}-zzz999", files=("block-1-0.h5", "notes.txt"))
    unrelated = make("something-else")
    h = start_daemon(None, os.path.join(sockdir, "w.sock"), spill_dir=str(spill), timeout=60)
    try:
        assert not stale.exists() and not empty.exists()
        assert live.exists() and other_host.exists() and not_ours.exists() and unrelated.exists()
        with open(h.log_path) as f:
            assert f"removed the spill directory {stale}" in f.read()
    finally:
        h.stop(timeout=5)


def test_a_cache_names_its_spill_directory_by_host_and_pid(tmp_path):
    with BlockCache(0, host_budget_bytes=0, spill_dir=str(tmp_path)) as cache:
        cache.put(np.zeros(10))
        assert os.path.basename(cache.spill_path).startswith(f"insitu-blocks-{host_tag()}-{os.getpid()}-")
