"""Several "hosts" on one machine, honestly apart: each a Linux network namespace (its own
address, reached only through a veth link to a bridge), mount namespace (its own ``/tmp``
and ``/dev/shm``: no daemon socket, directory or shared-memory segment is visible to
another host) and UTS namespace (its own hostname). The bridge lives in a namespace of its
own (no host firewall between the links); this process's namespace is one more port on it,
at ``<subnet>.1`` (where a Spark master and driver run).

    with Hosts(2) as hosts:                        # skipped by the caller where unavailable()
        a, b = hosts
        p = a.popen([sys.executable, "-c", "..."])     # runs inside host a
        a.link_bytes()                             # (rx, tx) bytes a's link counted

Import as ``from netns import Hosts, unavailable`` (``tests/`` is on ``sys.path``).
Everything made is removed in :meth:`Hosts.close` (processes of the namespaces killed,
namespaces and links deleted), whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Iterator, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

__all__ = ["Host", "Hosts", "cluster_engine", "jacobi", "jacobi_block", "jacobi_reference", "spark_cluster", "touch",
           "spark_hosts_env", "unavailable", "wait_executors"]


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to make network and mount namespaces"
    missing = [t for t in ("ip", "unshare", "nsenter", "mount") if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)} (iproute2, util-linux)"
    name = f"in26probe{os.getpid()}"
    r = _sh("ip", "netns", "add", name, check=False)
    if r.returncode:
        return f"cannot make a network namespace: {r.stderr.strip()}"
    _sh("ip", "netns", "del", name, check=False)
    r = _sh("unshare", "--mount", "--uts", "true", check=False)
    if r.returncode:
        return f"cannot make mount/UTS namespaces: {r.stderr.strip()}"
    return None


class Host:
    """One namespace "host": :attr:`name` (its hostname), :attr:`ip`, :meth:`popen`, :meth:`run`."""

    def __init__(self, name: str, netns: str, ip: str, link: str, mnt: str, uts: str) -> None:
        self.name, self.netns, self.ip, self.link, self._mnt, self._uts = name, netns, ip, link, mnt, uts

    def __repr__(self) -> str:
        return f"<Host {self.name} {self.ip}>"

    def command(self, cmd: Sequence[str]) -> list[str]:
        return ["nsenter", f"--net=/var/run/netns/{self.netns}", f"--mount={self._mnt}", f"--uts={self._uts}",
                "--", *cmd]

    def popen(self, cmd: Sequence[str], *, env: dict | None = None, **kw) -> subprocess.Popen:
        """Start `cmd` inside this host (environment `env`, default this process's)."""
        return subprocess.Popen(self.command(cmd), env=env, **kw)

    def run(self, cmd: Sequence[str], *, env: dict | None = None, timeout: float = 60.0) -> str:
        """Run `cmd` inside this host; its stdout (raises with its output if it fails)."""
        r = subprocess.run(self.command(cmd), env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode:
            raise RuntimeError(f"{self.name}: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r.stdout

    def link_bytes(self) -> tuple[int, int]:
        """(received, sent) bytes counted by this host's end of its veth link."""
        out = _sh("ip", "-n", self.netns, "-s", "-j", "link", "show", "dev", self.link).stdout
        st = json.loads(out)[0]["stats64"]
        return int(st["rx"]["bytes"]), int(st["tx"]["bytes"])

    def pids(self) -> list[int]:
        return [int(p) for p in _sh("ip", "netns", "pids", self.netns, check=False).stdout.split()]

    def kill(self) -> int:
        """SIGKILL every process of this host (a host that dies; its address stays, refusing
        connections). Returns how many were killed."""
        n = 0
        for _ in range(3):
            pids = self.pids()
            if not pids:
                break
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                    n += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return n


class Hosts:
    """`n` namespace hosts on one bridge, this process at :attr:`gateway`; a context manager."""

    def __init__(self, n: int) -> None:
        self.tag = secrets.token_hex(2)
        self.subnet = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(256)}"
        self.gateway = f"{self.subnet}.1"
        self.hosts: list[Host] = []
        self._sw = f"in26sw{self.tag}"
        self._dir = f"/run/insitu-netns-{self.tag}"
        self._made: list[tuple] = []  # what close() undoes, last first
        try:
            self._make(n)
        except BaseException:
            self.close()
            raise

    def _make(self, n: int) -> None:
        os.makedirs(self._dir)
        self._made.append(("rmdir", self._dir))
        # Persistent mount/UTS namespaces are bind mounts of /proc/<pid>/ns/*: on a private mount.
        _sh("mount", "--bind", self._dir, self._dir)
        self._made.append(("umount", self._dir))
        _sh("mount", "--make-private", self._dir)
        _sh("ip", "netns", "add", self._sw)
        self._made.append(("netns", self._sw))
        _sh("ip", "-n", self._sw, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self._sw, "link", "set", "br0", "up")
        # This process's port: the gateway address (master, driver).
        gw = f"in26g{self.tag}"
        _sh("ip", "link", "add", gw, "type", "veth", "peer", "name", "gw", "netns", self._sw)
        self._made.append(("link", gw))
        _sh("ip", "-n", self._sw, "link", "set", "gw", "master", "br0", "up")
        _sh("ip", "addr", "add", f"{self.gateway}/24", "dev", gw)
        _sh("ip", "link", "set", gw, "up")
        for i in range(n):
            name, netns = f"host{i}", f"in26h{self.tag}{i}"
            mnt, uts = os.path.join(self._dir, f"{i}.mnt"), os.path.join(self._dir, f"{i}.uts")
            _sh("ip", "netns", "add", netns)
            self._made.append(("netns", netns))
            _sh("ip", "-n", netns, "link", "set", "lo", "up")
            _sh("ip", "-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", self._sw)
            _sh("ip", "-n", self._sw, "link", "set", f"p{i}", "master", "br0", "up")
            ip = f"{self.subnet}.{i + 2}"
            _sh("ip", "-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _sh("ip", "-n", netns, "link", "set", "eth0", "up")
            for f in (mnt, uts):
                open(f, "w").close()
            # Own /tmp and /dev/shm (no socket, directory or segment of another host shows),
            # hostname, and /etc/hosts naming it (Java looks its own name up); the
            # namespaces stay (bound to the files) for nsenter. Software this process runs
            # from /tmp (a GPU node's staged wheels, PySpark, Java) stays visible: the
            # directories of _software_in_tmp(), bound from the old /tmp.
            old = os.path.join(self._dir, f"{i}.tmp")
            os.makedirs(old)
            self._made.append(("rmdir-empty", old))  # never a tree: /tmp is bound on it inside the host
            keep = "".join(f"mkdir -p {d} && mount --bind {old}/{os.path.relpath(d, '/tmp')} {d} && "
                           for d in _software_in_tmp())
            _sh("unshare", f"--mount={mnt}", f"--uts={uts}", "--propagation", "private", "sh", "-c",
                f"mount --bind /tmp {old} && mount -t tmpfs -o mode=1777 tmpfs /tmp && {keep}"
                f"mount -t tmpfs -o mode=1777 tmpfs /dev/shm && "
                f"hostname {name} && printf '127.0.0.1 localhost\\n{ip} {name}\\n' > /tmp/.hosts && "
                "mount --bind /tmp/.hosts /etc/hosts")
            self._made.append(("umount", mnt))
            self._made.append(("umount", uts))
            self.hosts.append(Host(name, netns, ip, "eth0", mnt, uts))
        deadline = time.monotonic() + 10.0  # the links come up (IPv6 DAD aside, at once)
        while _sh("ping", "-c1", "-W1", self.hosts[-1].ip, check=False).returncode if shutil.which("ping") else 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.hosts[-1].ip} is not reachable from this namespace")

    def __iter__(self):
        return iter(self.hosts)

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)

    def close(self) -> None:
        """Kill every process of the hosts, delete namespaces and links (never raises)."""
        for h in self.hosts:
            h.kill()
        for what, arg in reversed(self._made):
            if what == "umount":
                _sh("umount", "-l", arg, check=False)
            elif what == "netns":
                _sh("ip", "netns", "del", arg, check=False)
            elif what == "link":
                _sh("ip", "link", "del", arg, check=False)
            elif what == "rmdir":
                shutil.rmtree(arg, ignore_errors=True)
            elif what == "rmdir-empty":
                with contextlib.suppress(OSError):
                    os.rmdir(arg)
        self._made.clear()

    def __enter__(self) -> "Hosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _software_in_tmp() -> list[str]:
    """The directories right under /tmp that this process's Python path or Java come from."""
    paths = sys.path + os.environ.get("PYTHONPATH", "").split(os.pathsep) + [os.environ.get("JAVA_HOME", "")]
    tops = {os.path.join("/tmp", os.path.relpath(os.path.realpath(p), "/tmp").split(os.sep)[0])
            for p in paths if p and os.path.realpath(p).startswith("/tmp/")}
    return sorted(d for d in tops if os.path.isdir(d))


def python_path() -> str:
    """What processes in the hosts import from: the repository, tests and examples, then this
    process's Python path (staged packages included)."""
    from insitu.pool.daemon import _pythonpath

    first = [ROOT, HERE, os.path.join(ROOT, "examples")]
    return os.pathsep.join(dict.fromkeys(first + [p for p in _pythonpath().split(os.pathsep) if p]))


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_port(host: str, port: int, timeout: float, what: str, proc: subprocess.Popen, log: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(log, errors="replace") as f:
                    tail = f.read()[-3000:]
                why = "exited" if proc.poll() is not None else "timed out"
                raise RuntimeError(f"{what} did not listen at {host}:{port} ({why}); its log {log}:\n{tail}")
            time.sleep(0.1)


@contextlib.contextmanager
def spark_cluster(hosts: Hosts, *, cores: int = 2, memory: str = "1g", env: dict | None = None,
                  host_env=None, log_dir: str) -> Iterator[str]:
    """A Spark standalone master in this namespace (at the hosts' gateway) and one worker
    per host; yields the master URL. `host_env(host)` gives a worker's extra environment
    (its executors, their Python workers and daemons inherit it). Logs go to `log_dir`.
    The workers (and all their descendants) die with `hosts`; the master here on exit."""
    import pyspark

    from insitu.engine.java import java_home

    spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
    base = dict(os.environ if env is None else env, SPARK_HOME=spark_home, SPARK_NO_DAEMONIZE="1",
                PYSPARK_PYTHON=sys.executable)
    jh = java_home()
    if jh:
        base["JAVA_HOME"] = jh
    cls = os.path.join(spark_home, "bin", "spark-class")
    port = _free_port(hosts.gateway)
    mlog = os.path.join(log_dir, "master.log")
    with open(mlog, "wb") as f:
        master = subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host", hosts.gateway, "--port",
                                   str(port), "--webui-port", str(_free_port(hosts.gateway))],
                                  env=dict(base, SPARK_LOCAL_IP=hosts.gateway), stdout=f, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    url = f"spark://{hosts.gateway}:{port}"
    try:
        _wait_port(hosts.gateway, port, 60.0, "the Spark master", master, mlog)
        for h in hosts:
            wlog = os.path.join(log_dir, f"worker-{h.name}.log")
            with open(wlog, "wb") as f:
                h.popen([cls, "org.apache.spark.deploy.worker.Worker", "--host", h.ip, "--cores", str(cores),
                         "--memory", memory, "--webui-port", "0", "--work-dir", "/tmp/spark-work", url],
                        env=dict(base, SPARK_LOCAL_IP=h.ip, **(host_env(h) if host_env else {})), stdout=f,
                        stderr=subprocess.STDOUT)
        yield url
    finally:
        master.terminate()
        try:
            master.wait(10)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait()


def wait_executors(sc, n: int, timeout: float = 60.0) -> None:
    """Wait until `n` executors registered with the SparkContext `sc`."""
    deadline = time.monotonic() + timeout
    while sc._jsc.sc().getExecutorMemoryStatus().size() < n + 1:  # the driver counts too
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} executors did not register within {timeout:g} s")
        time.sleep(0.1)


# --------------------------------------------------------------------------- what tests and benchmarks run


def jacobi(block):
    """One Jacobi sweep of the 7-point average on a padded block (ghost layer 1), in place."""
    block[1:-1, 1:-1, 1:-1] = (block[:-2, 1:-1, 1:-1] + block[2:, 1:-1, 1:-1] + block[1:-1, :-2, 1:-1]
                               + block[1:-1, 2:, 1:-1] + block[1:-1, 1:-1, :-2] + block[1:-1, 1:-1, 2:]) / 6.0
    return block


def jacobi_field(dims) -> np.ndarray:
    return np.random.default_rng(3).random(dims)


def jacobi_block(gid, dims, nblocks):
    """Block `gid` of :func:`jacobi_field`, ghosts filled (zero outside the domain): a loader."""
    from insitu import Domain

    return Domain.create(dims, nblocks=nblocks, ghost=1).extract(jacobi_field(dims), gid)


def jacobi_reference(dims, iterations: int) -> np.ndarray:
    """The same sweeps on the whole grid (zero outside), independent of blocks and halos."""
    g = np.pad(jacobi_field(dims), 1)
    for _ in range(iterations):
        jacobi(g)
    return g[1:-1, 1:-1, 1:-1]


def spark_hosts_env(h) -> dict:
    """What a worker of namespace host `h` gives its executors (and their daemons)."""
    return {"INSITU_NODE_ID": h.name, "INSITU_NODE_HOST": h.ip, "INSITU_DAEMON_IDLE_TIMEOUT": "60",
            "PYTHONPATH": python_path()}


def cluster_engine(hosts: Hosts, url: str, *, timeout: float = 60.0, **kw):
    """A network :class:`~insitu.engine.spark.SparkEngine` whose driver runs here on the
    hosts' gateway, once one executor per host has registered."""
    from insitu.engine.spark import SparkEngine

    eng = SparkEngine(url, network=True, timeout=timeout, conf={
        "spark.driver.host": hosts.gateway, "spark.driver.bindAddress": hosts.gateway,
        "spark.executor.memory": "512m", "spark.cores.max": str(2 * len(hosts)),
        "spark.executorEnv.PYTHONPATH": python_path()}, **kw)
    try:
        wait_executors(eng.sc, len(hosts))
    except BaseException:
        eng.stop()
        raise
    return eng


def touch(block):
    """A kernel that leaves the block as it is: what remains is the halo exchange's cost."""
    return block
