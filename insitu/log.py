"""Logging: named loggers per module, the MPI rank in each record, the user's handlers first.

Every module logs through ``get_logger(__name__)``: the standard
``logging.getLogger(__name__)`` with a filter that puts the process's MPI rank in each
record (``record.rank``: an int, or None outside MPI). The records of a package go to its
top-level logger (``insitu`` for this one); like any library, these only get a
``NullHandler`` (the Python logging HOWTO's rule), so nothing is printed unless the
application configures logging::

    import logging
    logging.basicConfig(level=logging.INFO)   # the application's own handlers, or
    insitu.log.enable("INFO")                 # a stderr handler showing the rank

:func:`enable` serves programs that want the records on stderr without configuring
logging themselves (the worker daemon, the relay processes, a simulation's
configuration ``log:`` setting). It adds no handler where the user already has one.

The first use of a kernel that must be compiled is logged at INFO by the logger of the
module that owns it, ``compiling <name> (first use; cached in <dir>)``: CUDA sources of
the kernel cache, CuPy modules (:func:`compiling`), and Numba functions of the modules
:func:`watch_jit` names. The first Numba compile of a process is also announced once at
WARNING (so at the adaptor's default ``log: errors``), by rank 0 only under MPI: a first
step that stalls for seconds says why, and that ``insitu warmup`` compiles ahead of a job.

:class:`Progress` draws a progress bar on stderr for the long commands (``insitu replay``, the
benchmarks), only where stderr is a terminal unless asked: logs and pipes get no bar.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import IO, Any

__all__ = ["DEFAULT_FORMAT", "Progress", "RankFilter", "RankFormatter", "compiling", "cupy_cache_dir", "disable",
           "enable", "get_logger", "rank", "watch_jit"]

#: The format of :func:`enable`'s handler: ``[insitu rank 3] INFO insitu.pool.daemon: ...``
#: (``pid N`` in place of ``rank N`` outside MPI).
DEFAULT_FORMAT = "[insitu %(where)s] %(levelname)s %(name)s: %(message)s"

# Where a launcher puts the rank before MPI is initialized (Open MPI, PMIx, MPICH/Hydra).
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")

_lock = threading.RLock()
_mpi_rank: int | None = None  # found once MPI is initialized; a process keeps its rank
_packages: dict[str, logging.Logger] = {}  # top-level loggers of the packages logging through here
_handler: logging.Handler | None = None  # enable()'s
_level: int | None = None
_levels_set: set[str] = set()  # package loggers whose level enable() set (disable() puts them back)


def rank() -> int | None:
    """This process's MPI rank: ``COMM_WORLD``'s once mpi4py has initialized MPI, else the
    launcher's environment variable (Open MPI, PMIx, PMI), else None.

    mpi4py is not imported here (importing ``mpi4py.MPI`` initializes MPI).

    Returns
    -------
    int or None
    """
    global _mpi_rank
    if _mpi_rank is not None:
        return _mpi_rank
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None:
        try:
            if MPI.Is_initialized() and not MPI.Is_finalized():
                _mpi_rank = int(MPI.COMM_WORLD.Get_rank())
                return _mpi_rank
        except Exception:  # a record must not fail for its rank
            pass
    for var in _RANK_VARIABLES:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return None


class RankFilter(logging.Filter):
    """Sets ``record.rank`` (:func:`rank`) on records that have none; lets all through."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "rank"):
            record.rank = rank()
        return True


class RankFormatter(logging.Formatter):
    """A formatter that also knows ``%(where)s``: ``rank N``, or ``pid N`` outside MPI."""

    def format(self, record: logging.LogRecord) -> str:
        r = getattr(record, "rank", None)
        record.where = f"rank {r}" if r is not None else f"pid {record.process}"
        return super().format(record)


_FILTER = RankFilter()


def _package(top: str) -> logging.Logger:
    """The top-level logger of a package, given its NullHandler (and enable()'s handler) once."""
    with _lock:
        pkg = _packages.get(top)
        if pkg is None:
            pkg = _packages[top] = logging.getLogger(top)
            if not any(isinstance(h, logging.NullHandler) for h in pkg.handlers):
                pkg.addHandler(logging.NullHandler())
            if _level is not None:
                _apply(pkg, _level)
        return pkg


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the rank filter; its package's top-level logger gets
    a ``NullHandler``.

    Parameters
    ----------
    name : str
        The module's ``__name__``.

    Returns
    -------
    logging.Logger
        The standard logger of that name (the same object ``logging.getLogger`` returns).
    """
    log = logging.getLogger(name)
    with _lock:
        if _FILTER not in log.filters:
            log.addFilter(_FILTER)
    _package(name.partition(".")[0])
    return log


def _user_handlers() -> bool:
    """Whether the application has handlers of its own on the root logger or on a package
    logger (NullHandlers and enable()'s own do not count)."""
    loggers = [logging.getLogger(), *_packages.values()]
    return any(h is not _handler and not isinstance(h, logging.NullHandler) for lg in loggers for h in lg.handlers)


def _apply(pkg: logging.Logger, level: int) -> None:
    """Give a package logger enable()'s `level` (unless the user set one) and handler."""
    if pkg.level == logging.NOTSET or pkg.name in _levels_set:
        pkg.setLevel(level)
        _levels_set.add(pkg.name)
    if _handler is not None and _handler not in pkg.handlers:
        pkg.addHandler(_handler)


def enable(level: int | str = "INFO", *, stream: IO[str] | None = None, fmt: str = DEFAULT_FORMAT,
           force: bool = False) -> logging.Handler | None:
    """Show the records of the packages that log through this module at `level` and above.

    The package loggers (``insitu``, and those of the packages that use
    :func:`get_logger`, now and later) get `level`, unless the user set theirs. A handler
    writing to `stream` is added only if the application has no handler of its own (on the
    root logger or a package logger), or if `force`: the user's handlers are respected, and
    records are not printed twice. Calling it again replaces the previous settings.

    Parameters
    ----------
    level : int or str
        ``"DEBUG"``, ``"INFO"``, ``"WARNING"``, ``"ERROR"``, or a ``logging`` level.
    stream : file, optional
        Default ``sys.stderr``.
    fmt : str
        ``logging`` format; ``%(where)s`` is ``rank N`` (``pid N`` outside MPI),
        ``%(rank)s`` the rank or None.
    force : bool
        Add the handler even where the application has its own.

    Returns
    -------
    logging.Handler or None
        The handler added, or None where the user's handlers receive the records.
    """
    global _handler, _level
    lvl = logging.getLevelName(level.upper()) if isinstance(level, str) else int(level)
    if not isinstance(lvl, int):
        raise ValueError(f"level: expected DEBUG, INFO, WARNING, ERROR, CRITICAL or an int, got {level!r}")
    with _lock:
        _package("insitu")
        disable()
        _level = lvl
        if force or not _user_handlers():
            _handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
            _handler.setFormatter(RankFormatter(fmt))
            _handler.addFilter(_FILTER)  # records of loggers made without get_logger
        for pkg in _packages.values():
            _apply(pkg, lvl)
        return _handler


def disable() -> None:
    """Undo :func:`enable`: remove its handler, give the package loggers back the level
    they had (NOTSET)."""
    global _handler, _level
    with _lock:
        for pkg in _packages.values():
            if _handler is not None and _handler in pkg.handlers:
                pkg.removeHandler(_handler)
            if pkg.name in _levels_set:
                pkg.setLevel(logging.NOTSET)
        _levels_set.clear()
        _handler, _level = None, None


# --------------------------------------------------------------------------- compiling


def compiling(logger: logging.Logger, name: str, cache_dir: str | None) -> None:
    """Log at INFO that `name` is compiled now, on its first use in this process.

    Parameters
    ----------
    logger : logging.Logger
        The logger of the module that owns the kernel.
    name : str
        What is compiled (a kernel, a module of kernels).
    cache_dir : str or None
        Where the binary is kept for the next process; None: nowhere.
    """
    where = f"cached in {cache_dir}" if cache_dir else "not cached on disk"
    logger.info("compiling %s (first use; %s)", name, where)


def cupy_cache_dir() -> str:
    """Where CuPy keeps compiled modules: ``$CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``."""
    return os.environ.get("CUPY_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")


_jit_modules: set[str] = set()
_jit_listener: Any = None
_jit_state = threading.local()
_jit_told = False  # the one WARNING of the process said


def _tell_first_compile(logger: logging.Logger, cache_dir: str | None) -> None:
    """Once per process: WARNING on rank 0 (or outside MPI), INFO elsewhere (every rank compiles
    the same kernels: one line per job, not per rank)."""
    global _jit_told
    with _lock:
        if _jit_told:
            return
        _jit_told = True
    where = f"cached in {cache_dir}; NUMBA_CACHE_DIR moves it" if cache_dir else "not cached on disk"
    logger.log(logging.WARNING if rank() in (None, 0) else logging.INFO,
               "first run: compiling kernels, which takes seconds (`insitu warmup` does this ahead of a job; %s)",
               where)


def _watched(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in _jit_modules)


def _jit_listener_class() -> type:
    from numba.core import event  # the caller's module imports Numba already

    class _CompileListener(event.Listener):
        """Logs the outermost compile of a watched function on each thread (the functions
        it calls compile inside it)."""

        def on_start(self, ev: Any) -> None:
            stack = _jit_state.__dict__.setdefault("stack", [])
            disp = ev.data["dispatcher"]
            module = getattr(disp.py_func, "__module__", "") or ""
            watched = _watched(module)
            if watched and not any(stack):
                cache_dir = getattr(getattr(disp, "_cache", None), "_cache_path", None)  # None: no cache=True
                compiling(get_logger(module), f"{module}.{disp.py_func.__qualname__}", cache_dir)
                _tell_first_compile(get_logger(module), cache_dir)
            stack.append(watched)

        def on_end(self, ev: Any) -> None:
            stack = _jit_state.__dict__.get("stack")
            if stack:
                stack.pop()

    return _CompileListener


def watch_jit(module: str) -> None:
    """Log the Numba compiles of the functions of `module` (and its submodules).

    Numba compiles a function on its first call with new argument types, unless its
    on-disk cache (``cache=True``) has it; only real compiles are logged, once per
    specialization, by the logger of `module`.

    Parameters
    ----------
    module : str
        A module's ``__name__`` (or a package's).
    """
    global _jit_listener
    _package(module.partition(".")[0])
    with _lock:
        _jit_modules.add(module)
        if _jit_listener is None:
            from numba.core import event

            _jit_listener = _jit_listener_class()()
            event.register("numba:compile", _jit_listener)


# --------------------------------------------------------------------------- progress


class Progress:
    """A progress bar redrawn in place on one line: ``label [#######.............] 7/20 3.1 s note``.

    Drawn only when `enabled`, by default where `stream` is a terminal (a log file or a pipe
    gets nothing); redrawn at most every `interval` seconds, and always at the last unit.
    :meth:`write` prints a line above the bar. Under MPI, enable it on one rank only.

    Parameters
    ----------
    total : int
        Units of work (steps, iterations).
    label : str
        Printed before the bar.
    enabled : bool, optional
        True draws it wherever `stream` goes (``--progress``), False never; default: ``stream.isatty()``.
    stream : file, optional
        Default ``sys.stderr``.
    width : int
        Characters of the bar itself.
    interval : float
        Least seconds between two redraws.
    """

    def __init__(self, total: int, label: str = "", *, enabled: bool | None = None, stream: IO[str] | None = None,
                 width: int = 30, interval: float = 0.1) -> None:
        if total < 0:
            raise ValueError(f"total: expected an int >= 0, got {total!r}")
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.total, self.label, self.width, self.interval = total, label, width, interval
        self.done = 0
        self._t0 = time.perf_counter()
        self._drawn = -1.0  # when the bar was last drawn (-1: never)
        self._shown = 0  # characters of the line on screen

    def _line(self, note: str) -> str:
        frac = self.done / self.total if self.total else 1.0
        fill = min(self.width, int(self.width * frac))
        bar = "#" * fill + "." * (self.width - fill)
        head = f"{self.label} " if self.label else ""
        tail = f" {note}" if note else ""
        return f"{head}[{bar}] {self.done}/{self.total} {time.perf_counter() - self._t0:.1f} s{tail}"

    def _draw(self, note: str = "") -> None:
        line = self._line(note)
        # \r back to the line's start; spaces wipe what a longer previous line left.
        self.stream.write("\r" + line + " " * max(0, self._shown - len(line)))
        self.stream.flush()
        self._shown = len(line)
        self._drawn = time.perf_counter()

    def update(self, n: int = 1, note: str = "") -> None:
        """Count `n` more units done; redraw (with `note` after the counts) if it is time."""
        self.done += n
        if self.enabled and (self.done >= self.total or self._drawn < 0
                             or time.perf_counter() - self._drawn >= self.interval):
            self._draw(note)

    def write(self, text: str, file: IO[str] | None = None) -> None:
        """Print a line of `text` on `file` (default: the bar's stream), above the bar when it is drawn."""
        out = file if file is not None else self.stream
        shown = self.enabled and self._drawn >= 0
        if shown:  # wipe the bar, print, draw it again below
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0
        out.write(text + "\n")
        out.flush()
        if shown:
            self._draw()

    def close(self) -> None:
        """Draw the final state and end the line."""
        if self.enabled and self._drawn >= 0:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
