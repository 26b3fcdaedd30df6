"""Logging (insitu.log): named loggers, the rank in each record, the user's handlers, compile messages."""

import io
import json
import logging
import os
import re
import select
import shutil
import subprocess
import sys
import textwrap
import tempfile
import types

import numba
import pytest
import render.gl.context  # noqa: F401 - logs through insitu.log: the package 'render' is known

import insitu
from insitu import log as insitu_log
from insitu.pool import kernels
from insitu.pool.kernels import KernelCache, _Loaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")


@pytest.fixture
def rank_from_env(monkeypatch):
    """No MPI in sight: the rank comes from the launcher's variable (3), set here."""
    monkeypatch.setattr(insitu_log, "_mpi_rank", None)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    for var in RANK_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMI_RANK", "3")
    return 3


@pytest.fixture
def fake_gpu(monkeypatch):
    """The kernel cache's CUDA path with a fake NVRTC: `calls` counts the compiles."""
    calls = []

    def compile_(source, name, options, name_expressions):
        calls.append(name)
        return b"\x7fELF fake cubin of " + name.encode(), {}

    def load(binary, mapping, *, kernels):
        module = types.SimpleNamespace(get_function=lambda name: f"function {name} of {binary!r}")
        return _Loaded(module, dict(mapping), kernels)

    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    monkeypatch.setattr(kernels, "_require_cupy", lambda what: cp)
    monkeypatch.setattr(KernelCache, "platform", lambda self: ("fake-cupy", "90", "fake-nvrtc"))
    monkeypatch.setattr(KernelCache, "_compile", staticmethod(compile_))
    monkeypatch.setattr(KernelCache, "_load", staticmethod(load))
    return calls


SOURCE = 'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2; }'


def compile_records(caplog):
    return [r for r in caplog.records if r.getMessage().startswith("compiling ")]


def run_python(code, env=None, **kw):
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    for var in RANK_VARIABLES:
        if var not in (env or {}):
            e.pop(var, None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=120, **kw)


# --------------------------------------------------------------------------- the rank


def test_the_rank_comes_from_the_launcher_without_mpi(rank_from_env):
    assert insitu_log.rank() == rank_from_env


def test_the_rank_comes_from_mpi_once_it_is_initialized(monkeypatch):
    monkeypatch.setattr(insitu_log, "_mpi_rank", None)
    monkeypatch.setenv("PMI_RANK", "3")
    state = {"initialized": False}
    fake = types.SimpleNamespace(Is_initialized=lambda: state["initialized"], Is_finalized=lambda: False,
                                 COMM_WORLD=types.SimpleNamespace(Get_rank=lambda: 5))
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake)
    assert insitu_log.rank() == 3  # imported, not initialized: MPI is not asked
    state["initialized"] = True
    assert insitu_log.rank() == 5


def test_no_rank_outside_mpi(monkeypatch):
    monkeypatch.setattr(insitu_log, "_mpi_rank", None)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    for var in RANK_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    assert insitu_log.rank() is None


# --------------------------------------------------------------------------- records


def test_records_of_the_named_loggers_carry_the_rank(caplog, rank_from_env, fake_gpu, tmp_path):
    caplog.set_level(logging.INFO, logger="insitu")
    KernelCache(str(tmp_path / "k")).get(SOURCE, "scale")
    (rec,) = compile_records(caplog)
    assert rec.name == "insitu.pool.kernels" and rec.levelno == logging.INFO
    assert rec.rank == rank_from_env


def test_a_user_handler_on_the_package_logger_receives_the_records(rank_from_env, fake_gpu, tmp_path):
    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, record):
            self.records.append(record)

    keep = Keep()
    pkg = logging.getLogger("insitu")
    pkg.addHandler(keep)
    pkg.setLevel(logging.INFO)
    try:
        KernelCache(str(tmp_path / "k")).get(SOURCE, "scale")
    finally:
        pkg.removeHandler(keep)
        pkg.setLevel(logging.NOTSET)
    assert [(r.name, r.rank) for r in keep.records] == [("insitu.pool.kernels", rank_from_env)]
    assert "compiling CUDA kernel 'scale' (first use; cached in " in keep.records[0].getMessage()


def test_the_library_adds_no_handler_and_prints_nothing_unconfigured():
    # a fresh interpreter: pytest puts handlers of its own on the root logger
    p = run_python("""
        import logging, sys
        import insitu, insitu.pool.daemon, insitu.pool.kernels, insitu.stream.steering, insitu.viewer.server
        import render.contour, render.volume, render.raster, render.gl.context, solvers.eikonal._cpu
        from insitu.log import get_logger
        assert logging.getLogger().handlers == [], logging.getLogger().handlers
        for name in ("insitu", "render", "solvers"):
            hs = logging.getLogger(name).handlers
            assert [type(h) for h in hs] == [logging.NullHandler], (name, hs)
        get_logger("insitu.pool.daemon").warning("not shown: no handler was configured")
        get_logger("render.contour._cpu").error("nor this")
        print("OK")
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "OK\n" and p.stderr == ""


# --------------------------------------------------------------------------- enable()


def test_enable_adds_no_handler_where_the_user_has_one(caplog, rank_from_env, fake_gpu, tmp_path):
    # pytest's capture handler sits on the root logger: the user's, for enable()
    caplog.set_level(logging.INFO)
    try:
        assert insitu_log.enable("INFO") is None
        assert logging.getLogger("insitu").level == logging.INFO
        KernelCache(str(tmp_path / "k")).get(SOURCE, "scale")
        assert len(compile_records(caplog)) == 1  # once, through the user's handler
    finally:
        insitu_log.disable()
    assert logging.getLogger("insitu").level == logging.NOTSET


def test_enable_shows_the_rank_on_its_stream(rank_from_env, fake_gpu, tmp_path):
    out = io.StringIO()
    try:
        handler = insitu_log.enable("INFO", stream=out, force=True)
        assert handler in logging.getLogger("insitu").handlers and handler in logging.getLogger("render").handlers
        assert handler not in logging.getLogger().handlers
        KernelCache(str(tmp_path / "k")).get(SOURCE, "scale")
        insitu_log.get_logger("render.gl.context").debug("below the level: not shown")
    finally:
        insitu_log.disable()
    assert handler not in logging.getLogger("insitu").handlers
    assert out.getvalue() == (f"[insitu rank 3] INFO insitu.pool.kernels: compiling CUDA kernel 'scale' "
                              f"(first use; cached in {tmp_path / 'k'})\n")


def test_enable_keeps_a_level_the_user_set():
    render = logging.getLogger("render")
    render.setLevel(logging.ERROR)
    try:
        insitu_log.enable("DEBUG", stream=io.StringIO(), force=True)
        assert render.level == logging.ERROR and logging.getLogger("insitu").level == logging.DEBUG
    finally:
        insitu_log.disable()
        render.setLevel(logging.NOTSET)
    assert logging.getLogger("insitu").level == logging.NOTSET


def test_enable_refuses_an_unknown_level():
    with pytest.raises(ValueError, match="level: expected DEBUG, INFO"):
        insitu_log.enable("LOUD")


def test_a_package_logging_after_enable_gets_its_handler():
    p = run_python("""
        import insitu
        insitu.log.enable("INFO")           # before render is imported
        from insitu.log import get_logger
        get_logger("render.volume").info("volume says hello")
        get_logger("render.volume").debug("not shown")
    """, env={"OMPI_COMM_WORLD_RANK": "1"})
    assert p.returncode == 0, p.stderr
    assert p.stderr == "[insitu rank 1] INFO render.volume: volume says hello\n" and p.stdout == ""


# --------------------------------------------------------------------------- compiles


def test_a_cuda_kernel_compile_is_logged_once(caplog, fake_gpu, tmp_path):
    caplog.set_level(logging.INFO, logger="insitu")
    cache = KernelCache(str(tmp_path / "k"))
    cache.get(SOURCE, "scale")
    cache.get(SOURCE, "scale")  # in memory
    KernelCache(str(tmp_path / "k")).get(SOURCE, "scale")  # another process's view: from the disk
    assert fake_gpu == ["scale"]
    assert [r.getMessage() for r in compile_records(caplog)] == [
        f"compiling CUDA kernel 'scale' (first use; cached in {tmp_path / 'k'})"]


def test_a_cuda_kernel_compile_into_an_untrusted_directory_says_it_is_not_cached(caplog, fake_gpu, tmp_path):
    caplog.set_level(logging.INFO, logger="insitu")
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="others than its owner may write"):
        KernelCache(str(d)).get(SOURCE, "scale")
    assert [r.getMessage() for r in compile_records(caplog)] == [
        "compiling CUDA kernel 'scale' (first use; not cached on disk)"]


_JIT_MODULE = "insitu_test_jit"


def _jit_functions(module: str):
    """Fresh Numba functions of `module` (so nothing is compiled yet): outer calls inner."""
    ns = {"__name__": module, "numba": numba}
    exec(textwrap.dedent("""
        @numba.njit
        def inner(x):
            return x * 2

        @numba.njit
        def outer(x):
            return inner(x) + 1
    """), ns)
    return ns["inner"], ns["outer"]


def test_a_numba_compile_of_a_watched_module_is_logged_once(caplog):
    insitu_log.watch_jit(_JIT_MODULE)
    caplog.set_level(logging.INFO)
    inner, outer = _jit_functions(_JIT_MODULE + ".kernels")
    assert outer(3) == 7
    assert outer(4) == 9  # compiled already
    recs = compile_records(caplog)
    # the outermost compile only: inner compiles inside outer's
    assert [(r.name, r.getMessage()) for r in recs] == [
        (f"{_JIT_MODULE}.kernels", f"compiling {_JIT_MODULE}.kernels.outer (first use; not cached on disk)")]
    assert hasattr(recs[0], "rank")
    assert outer(2.5) == 6.0  # new argument types: a new specialization, compiled and logged
    assert len(compile_records(caplog)) == 2


def test_numba_compiles_of_other_modules_are_not_logged(caplog):
    insitu_log.watch_jit(_JIT_MODULE)
    caplog.set_level(logging.INFO)
    inner, outer = _jit_functions("someone_elses_module")
    assert outer(3) == 7
    assert compile_records(caplog) == []


def test_the_kernel_modules_are_watched():
    import render.contour._cpu
    import render.raster._cpu
    import render.volume._cpu
    import solvers.eikonal._cpu

    for mod in (render.contour._cpu, render.raster._cpu, render.volume._cpu, solvers.eikonal._cpu):
        assert insitu_log._watched(mod.__name__), mod.__name__


def test_compiling_names_the_kernel_and_the_cache(caplog):
    caplog.set_level(logging.INFO)
    log = insitu_log.get_logger("render.contour._gpu")
    insitu_log.compiling(log, "the marching cubes kernels (mc_*)", "/cache/dir")
    (rec,) = compile_records(caplog)
    assert rec.name == "render.contour._gpu"
    assert rec.getMessage() == "compiling the marching cubes kernels (mc_*) (first use; cached in /cache/dir)"


def test_cupy_cache_dir(monkeypatch):
    monkeypatch.setenv("CUPY_CACHE_DIR", "/somewhere")
    assert insitu_log.cupy_cache_dir() == "/somewhere"
    monkeypatch.delenv("CUPY_CACHE_DIR")
    assert insitu_log.cupy_cache_dir() == os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")


# --------------------------------------------------------------------------- processes


def test_the_steering_relay_logs_on_stderr_and_keeps_stdout_for_data(tmp_path):
    pytest.importorskip("adios2")
    name = str(tmp_path / "frames.steer")
    with open(name + ".sst", "w") as f:
        f.write("not a real writer\n")
    os.chmod(name + ".sst", 0o666)  # others could have written it: refused
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMPI_COMM_WORLD_RANK="2")
    p = subprocess.Popen([sys.executable, "-m", "insitu.stream.relay", "steer", name], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 60)
        line = p.stdout.readline() if ready else ""
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
    kind, problem = json.loads(line)
    assert kind == "problem" and "refusing SST contact file" in problem
    assert f"[insitu rank 2] WARNING insitu.stream.steering: steering relay: {problem}" in err


def test_insitu_exports_log():
    assert insitu.log is insitu_log and "log" in insitu.__all__


def test_a_daemon_logs_with_its_pid_and_time(tmp_path):
    from insitu.pool.daemon import start_daemon

    sockdir = tempfile.mkdtemp(dir="/tmp", prefix="insitu-log-")  # Unix socket paths are short
    try:
        h = start_daemon(None, os.path.join(sockdir, "w.sock"), timeout=60)
        try:
            with open(h.log_path) as f:
                log = f.read()
        finally:
            h.stop(timeout=10)
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)
    line = next(s for s in log.splitlines() if "listening on" in s)
    head = rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} \[insitu daemon pid {h.pid}\] INFO insitu\.pool\.daemon: "
    assert re.match(head + re.escape(f"insitu worker daemon pid {h.pid} device None listening on {h.socket_path}"),
                    line), line
