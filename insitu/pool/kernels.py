"""The kernel cache and the registry of named algorithms.

A worker runs three kinds of kernels (:func:`exec_kernel` tells them apart):

- **CUDA C/C++ source** and a function name: compiled once with NVRTC through CuPy and
  cached in memory and on disk (:class:`KernelCache`), so a new process, or the next
  run of a simulation, loads the binary instead of compiling;
- **Python callables**: Numba ``@njit`` / ``@cuda.jit`` functions, plain Python
  functions working on NumPy or CuPy arrays, CuPy ``ElementwiseKernel`` / ``RawKernel``
  objects. They are passed through: Numba keeps its own cache of compiled
  specializations (in memory, and on disk with ``cache=True``), CuPy its own;
- **registered names** (``"contour.marching_cubes"``, ...): algorithms that installed
  packages declare as entry points in the group ``insitu.kernels`` (imported on first
  use) or that :func:`register` adds; see :func:`lookup`.

The disk cache
--------------
A module's key is the SHA-256 of its source, the compile options, the name
expressions, the CuPy version, the device's compute capability and the NVRTC
version; the function name is not in it (one compiled module serves all its
kernels). On a miss (logged at INFO: ``compiling CUDA kernel 'name' (first use;
cached in DIR)``) the source is compiled with
``cupy.cuda.compiler.compile_using_nvrtc`` (CuPy >= 9: it returns the binary, CUBIN
or PTX, and the mangled names of the name expressions) and stored as two files in
the cache directory:

- ``<key>.<sha256 of the binary, 16 digits>.cubin`` (or ``.ptx``): the binary;
- ``<key>.json``: written last, it names the binary, its SHA-256, the name
  expressions' mangled names and the platform.

Both are written to a temporary file in the directory and renamed (``os.replace``),
so another process sees either the whole entry or none; a binary that does not
match its hash is ignored (compiled again). A binary is code that runs on the GPU
with the user's rights, so only a directory owned by this user and writable by no
one else is used (created with mode 0700), and only files in it that are owned by this
user, writable by no one else and not symbolic links; anything else is ignored with a
warning (the module is compiled again, and nothing is stored there). A process loads an entry with
``cupy.cuda.function.Module().load(binary)`` and ``Module.get_function(name)``, the
calls CuPy's own cache uses; no compile happens. CuPy's own on-disk cache
(``CUPY_CACHE_DIR``) cannot stand in here: it always recompiles a module with name
expressions, to learn the mangled names.

Like ``cupy.RawModule(code=...)``, the compile adds ``-ftz=true`` (unless an
``-ftz`` option is given) and the include directories of CuPy's headers and of the
CUDA toolkit, where CuPy finds one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import io
import json
import os
import re
import stat
import tempfile
import threading
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from insitu import arrays, plugins
from insitu.arrays import DeviceUnavailableError
from insitu.log import compiling, get_logger

__all__ = [
    "DEFAULT_BLOCK",
    "KERNEL_GROUP",
    "KernelCache",
    "KernelCompileError",
    "KernelNotFoundError",
    "atomic_write",
    "cache_key",
    "default_cache",
    "default_cache_dir",
    "exec_kernel",
    "is_kernel_name",
    "lookup",
    "names",
    "register",
    "unregister",
]

#: Threads per block of a launch that gives no `block`.
DEFAULT_BLOCK = 256

_ENTRY_VERSION = 1
_log = get_logger(__name__)
_NAME_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class KernelCompileError(RuntimeError):
    """NVRTC could not compile a CUDA source; :attr:`log` holds NVRTC's log."""

    def __init__(self, message: str, *, log: str = "", function_name: str = "",
                 options: tuple = ()) -> None:
        super().__init__(message)
        self.log = log
        self.function_name = function_name
        self.options = options


class KernelNotFoundError(LookupError):
    """A compiled module has no function of the name asked for."""

    def __str__(self) -> str:  # LookupError would quote the message like KeyError does
        return str(self.args[0]) if self.args else ""


# --------------------------------------------------------------------------- helpers


def default_cache_dir() -> str:
    """``$INSITU_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/insitu/kernels`` (``~/.cache``)."""
    d = os.environ.get("INSITU_KERNEL_CACHE")
    if d:
        return os.path.abspath(os.path.expanduser(d))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "insitu", "kernels")


def atomic_write(path: str, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one.

    The bytes go to a temporary file in the same directory, which is then renamed
    over `path` (``os.replace``, atomic on POSIX and Windows); on any error the
    temporary file is removed and `path` is left as it was.

    Parameters
    ----------
    path : str
    data : bytes
    """
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix="-" + os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _untrusted(st: os.stat_result) -> str | None:
    """Why a cache directory or file of status `st` must not be used; None if it may."""
    if st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}, not to this user ({os.getuid()})"
    if st.st_mode & 0o022:
        return f"others than its owner may write to it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _str_tuple(x: Any, what: str) -> tuple[str, ...]:
    if x is None:
        return ()
    if isinstance(x, str):
        return (x,)
    t = tuple(x)
    if not all(isinstance(s, str) for s in t):
        raise TypeError(f"{what}: expected strings, got {t!r}")
    return t


def cache_key(source: str, options: Sequence[str] = (), name_expressions: Sequence[str] = (), *,
              platform: Sequence[str]) -> str:
    """The disk-cache key of a CUDA module: a SHA-256 hex digest.

    Parameters
    ----------
    source : str
        CUDA C/C++ source.
    options : sequence of str
        NVRTC options as given (order matters).
    name_expressions : sequence of str
        Name expressions (``"f<float>"``) whose mangled names are wanted.
    platform : sequence of str
        What else decides the binary: CuPy version, compute capability, NVRTC version
        (:meth:`KernelCache.platform` gives the current device's).

    Returns
    -------
    str
    """
    doc = json.dumps({"v": _ENTRY_VERSION, "source": source, "options": list(_str_tuple(options, "options")),
                      "name_expressions": list(_str_tuple(name_expressions, "name_expressions")),
                      "platform": [str(p) for p in platform]}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()


def _global_functions(source: str) -> list[str]:
    """Names of the ``__global__`` functions in `source` (a hint for error messages)."""
    s = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    s = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", s)
    found = []
    for m in re.finditer(r"__global__\b([^;{(]*)\(", s):
        words = re.findall(r"[A-Za-z_]\w*", m.group(1))
        if words and words[-1] not in found:
            found.append(words[-1])
    return found


def _require_cupy(what: str):
    cp = arrays.cupy_or_none()
    if cp is None:
        why = arrays._cupy_status()[1]
        raise DeviceUnavailableError(f"{what} needs CuPy and a CUDA device, but {why}")
    return cp


# --------------------------------------------------------------------------- the cache


@dataclasses.dataclass
class _Loaded:
    """A module loaded on one device, and its functions fetched so far."""

    module: Any
    mapping: dict
    kernels: list
    functions: dict = dataclasses.field(default_factory=dict)

    def function(self, name: str):
        f = self.functions.get(name)
        if f is None:
            try:
                f = self.module.get_function(self.mapping.get(name, name))
            except Exception as exc:  # cupy_backends' CUDADriverError: CUDA_ERROR_NOT_FOUND
                hint = ("; a templated kernel or a C++ (not extern \"C\") one is found by its name "
                        "expression, e.g. 'kernel<float>'")
                raise KernelNotFoundError(
                    f"CUDA kernel {name!r} is not in the compiled module ({exc.__class__.__name__}: {exc}); "
                    f"__global__ functions in the source: {self.kernels}; name expressions: "
                    f"{sorted(self.mapping)}{hint}") from exc
            self.functions[name] = f
        return f


class KernelCache:
    """Compiled CUDA modules, in memory and on disk, shared by the processes of a machine.

    Parameters
    ----------
    cache_dir : str, optional
        Where compiled modules are stored; default :func:`default_cache_dir`
        (``$INSITU_KERNEL_CACHE`` or ``~/.cache/insitu/kernels``). Created when the
        first module is stored.

    Notes
    -----
    Thread-safe. :meth:`stats` counts, for this object: ``compiles`` (NVRTC runs),
    ``memory_hits`` (modules already loaded), ``disk_hits`` (modules loaded from the
    directory without compiling) and ``callables`` (Python callables handed out by
    :meth:`get_callable`).
    """

    def __init__(self, cache_dir: str | None = None) -> None:
        self.cache_dir = os.path.abspath(os.path.expanduser(cache_dir)) if cache_dir else default_cache_dir()
        self._lock = threading.RLock()
        self._loaded: dict[tuple[str, int], _Loaded] = {}
        self._platforms: dict[int, tuple[str, ...]] = {}
        self._stats = {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "callables": 0}
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"KernelCache({self.cache_dir!r}, stats={self.stats()})"

    def __getstate__(self) -> dict:  # loaded modules belong to this process
        return {"cache_dir": self.cache_dir}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["cache_dir"])

    # -- stats ---------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters: ``compiles``, ``memory_hits``, ``disk_hits``, ``callables``."""
        with self._lock:
            return dict(self._stats)

    def clear_memory(self) -> None:
        """Forget the modules loaded in this process (the disk entries stay)."""
        with self._lock:
            self._loaded.clear()

    # -- CUDA source ---------------------------------------------------------------------

    def platform(self) -> tuple[str, ...]:
        """``(CuPy version, compute capability, NVRTC version)`` of the current device.

        Raises
        ------
        DeviceUnavailableError
            No CuPy or no CUDA device.
        """
        cp = _require_cupy("a CUDA kernel")
        dev = int(cp.cuda.runtime.getDevice())
        p = self._platforms.get(dev)
        if p is None:
            try:
                nvrtc = ".".join(map(str, importlib.import_module("cupy.cuda.compiler")._get_nvrtc_version()))
            except Exception:  # a private helper: fall back on the public module
                try:
                    nvrtc = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
                except Exception:  # only part of the key
                    nvrtc = "unknown"
            p = (str(cp.__version__), str(cp.cuda.Device(dev).compute_capability), nvrtc)
            self._platforms[dev] = p
        return p

    def key(self, source: str, *, options: Sequence[str] = (), name_expressions: Sequence[str] = ()) -> str:
        """:func:`cache_key` of a module on the current device."""
        return cache_key(source, options, name_expressions, platform=self.platform())

    def get(self, source: str, name: str, *, options: Sequence[str] = (), name_expressions: Sequence[str] = ()):
        """The kernel `name` of CUDA `source`, compiled at most once per machine.

        Parameters
        ----------
        source : str
            CUDA C/C++ source.
        name : str
            The ``__global__`` function: an ``extern "C"`` name, or a name expression
            (``"scale<float>"``; one not in `name_expressions` is added to them).
        options : sequence of str
            NVRTC options (``"-std=c++17"``, ``"-DN=4"``, ...).
        name_expressions : sequence of str
            Template instantiations / C++ names to compile and find by name.

        Returns
        -------
        cupy.cuda.function.Function
            Callable as ``kernel(grid, block, args, shared_mem=0, stream=None)``, like
            ``cupy.RawModule(...).get_function(name)``; bound to the current device.

        Raises
        ------
        DeviceUnavailableError
            No CuPy or no CUDA device.
        KernelCompileError
            NVRTC failed; the message holds its log.
        KernelNotFoundError
            The module has no function `name`.
        """
        if not isinstance(source, str):
            raise TypeError(f"source: expected CUDA source as str, got {type(source).__name__}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"name: expected the kernel's name (str), got {name!r}")
        cp = _require_cupy(f"CUDA kernel {name!r}")
        options = _str_tuple(options, "options")
        name_expressions = _str_tuple(name_expressions, "name_expressions")
        if not re.fullmatch(r"[A-Za-z_]\w*", name) and name not in name_expressions:
            name_expressions += (name,)
        platform = self.platform()
        key = cache_key(source, options, name_expressions, platform=platform)
        dev = int(cp.cuda.runtime.getDevice())
        with self._lock:
            loaded = self._loaded.get((key, dev))
            if loaded is not None:
                self._stats["memory_hits"] += 1
            else:
                kernels = _global_functions(source)
                entry = self._fetch(key, platform)
                if entry is not None:
                    self._stats["disk_hits"] += 1
                else:
                    compiling(_log, f"CUDA kernel {name!r}", self.cache_dir if self._dir_trusted() else None)
                    entry = self._compile(source, name, options, name_expressions)
                    self._stats["compiles"] += 1
                    self._store(key, entry[0], entry[1], platform=platform, options=options,
                                name_expressions=name_expressions, kernels=kernels)
                loaded = self._load(*entry, kernels=kernels)
                self._loaded[(key, dev)] = loaded
            return loaded.function(name)

    def launch(self, kernel, grid, block, args: Sequence, shared_mem: int = 0, stream=None) -> None:
        """Launch a kernel from :meth:`get` (or a CuPy ``RawKernel``).

        `grid` None: a 1-D grid covering the first device array argument, `block`
        threads (default :data:`DEFAULT_BLOCK`) each.
        """
        grid, block = _launch_config(grid, block, args, name=getattr(kernel, "name", "kernel"))
        if grid is None:
            return  # nothing to cover
        kw = {"shared_mem": int(shared_mem)}
        if stream is not None:
            kw["stream"] = stream
        kernel(grid, block, tuple(args), **kw)

    @staticmethod
    def _compile(source: str, name: str, options: tuple, name_expressions: tuple) -> tuple[bytes, dict]:
        compiler = importlib.import_module("cupy.cuda.compiler")
        full = _rawmodule_options(options)
        log = io.StringIO()
        try:
            binary, mapping = compiler.compile_using_nvrtc(
                source, full, None, filename="insitu_kernel.cu",
                name_expressions=list(name_expressions) or None, log_stream=log)
        except compiler.CompileException as exc:
            nvrtc_log = str(exc)
            raise KernelCompileError(
                f"NVRTC could not compile the CUDA source of kernel {name!r} (options {list(full)}):\n{nvrtc_log}",
                log=nvrtc_log, function_name=name, options=full) from exc
        mapping = {str(k): v.decode() if isinstance(v, bytes) else str(v) for k, v in (mapping or {}).items()}
        return bytes(binary), mapping

    @staticmethod
    def _load(binary: bytes, mapping: dict, *, kernels: list) -> _Loaded:
        function = importlib.import_module("cupy.cuda.function")
        module = function.Module()
        module.load(bytes(binary))
        return _Loaded(module, dict(mapping), kernels)

    # -- the disk entries (no CuPy needed) -----------------------------------------------

    def _meta_path(self, key: str) -> str:
        return os.path.join(self.cache_dir, f"{key}.json")

    def _distrust(self, path: str, why: str) -> None:
        if path not in self._warned:  # once per path and cache: every kernel would repeat it
            self._warned.add(path)
            warnings.warn(f"kernel cache: ignoring {path}: {why}; CUDA modules are compiled again instead of "
                          "loaded from there. Use a directory of your own, writable only by you "
                          "(INSITU_KERNEL_CACHE)", RuntimeWarning, stacklevel=4)

    def _dir_trusted(self) -> bool:
        """Whether the cache directory may be used (a missing one may: it is made 0700)."""
        try:
            st = os.stat(self.cache_dir)
        except FileNotFoundError:
            return True
        why = _untrusted(st) if stat.S_ISDIR(st.st_mode) else "it is not a directory"
        if why is not None:
            self._distrust(self.cache_dir, why)
        return why is None

    def _read(self, path: str) -> bytes | None:
        """The bytes of a cache file, if it is a regular file that may be trusted."""
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # checked and read: the same file
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            why = _untrusted(st) if stat.S_ISREG(st.st_mode) else "it is not a regular file"
            if why is not None:
                self._distrust(path, why)
                return None
            return f.read()

    def _store(self, key: str, binary: bytes, mapping: Mapping[str, str], *, platform: Sequence[str],
               options: Sequence[str] = (), name_expressions: Sequence[str] = (),
               kernels: Sequence[str] = ()) -> bool:
        """Write an entry: the binary, then its description. False (and a warning) if
        the directory is not writable: the module then lives in memory only."""
        digest = hashlib.sha256(binary).hexdigest()
        fmt = "cubin" if binary[:4] == b"\x7fELF" else "ptx"
        bin_name = f"{key}.{digest[:16]}.{fmt}"
        meta = {"version": _ENTRY_VERSION, "binary": bin_name, "sha256": digest, "format": fmt,
                "mapping": dict(mapping), "platform": [str(p) for p in platform], "options": list(options),
                "name_expressions": list(name_expressions), "kernels": list(kernels)}
        try:
            os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
            if not self._dir_trusted():
                return False
            atomic_write(os.path.join(self.cache_dir, bin_name), binary)
            atomic_write(self._meta_path(key), json.dumps(meta, indent=1).encode())
        except OSError as exc:
            warnings.warn(f"kernel cache: could not store a compiled module in {self.cache_dir} ({exc}); "
                          "it will be compiled again by the next process", RuntimeWarning, stacklevel=3)
            return False
        return True

    def _fetch(self, key: str, platform: Sequence[str]) -> tuple[bytes, dict] | None:
        """``(binary, mapping)`` of a valid entry, else None (missing, partial,
        corrupt, or made for another platform)."""
        try:
            if not self._dir_trusted():
                return None
            raw = self._read(self._meta_path(key))
            if raw is None:
                return None
            meta = json.loads(raw)
            if (meta.get("version") != _ENTRY_VERSION or meta.get("platform") != [str(p) for p in platform]
                    or os.path.basename(meta["binary"]) != meta["binary"]):
                return None
            binary = self._read(os.path.join(self.cache_dir, meta["binary"]))
            if binary is None or hashlib.sha256(binary).hexdigest() != meta["sha256"]:
                return None
            mapping = meta.get("mapping") or {}
            if not isinstance(mapping, dict):
                return None
            return binary, {str(k): str(v) for k, v in mapping.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    # -- Python callables ----------------------------------------------------------------

    def get_callable(self, fn: Callable) -> Callable:
        """Hand back a Python kernel as it is, counted in ``stats()["callables"]``.

        Numba ``@njit`` / ``@cuda.jit`` functions keep their own cache of compiled
        specializations (per argument types, in memory; on disk with ``cache=True``);
        CuPy ``ElementwiseKernel`` / ``RawKernel`` objects theirs. Nothing is
        compiled here.
        """
        if not callable(fn):
            raise TypeError(f"expected a callable kernel, got {type(fn).__name__}")
        with self._lock:
            self._stats["callables"] += 1
        return fn


def _rawmodule_options(options: tuple) -> tuple[str, ...]:
    """`options` plus what ``cupy.RawModule(code=...)`` adds: ``-ftz=true`` and include
    directories (CuPy's headers, the CUDA toolkit's)."""
    full = tuple(options)
    if not any(o.lstrip("-").startswith("ftz") for o in full):
        full += ("-ftz=true",)
    try:
        import cupy

        inc = os.path.join(os.path.dirname(cupy.__file__), "_core", "include")
        if os.path.isdir(inc):
            full += (f"-I{inc}",)
        cuda_path = cupy.cuda.get_cuda_path()
        if cuda_path and os.path.isdir(os.path.join(cuda_path, "include")):
            full += (f"-I{os.path.join(cuda_path, 'include')}",)
    except Exception:  # include paths are a convenience
        pass
    return full


_default: KernelCache | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """One process-wide :class:`KernelCache` on :func:`default_cache_dir`."""
    global _default
    with _default_lock:
        if _default is None:
            _default = KernelCache()
        return _default


# --------------------------------------------------------------------------- registry

#: Entry point group in which packages declare kernels: ``"name" = "module:function"``.
KERNEL_GROUP = "insitu.kernels"

# name -> callable, or "module:attribute" imported on first lookup (so importing insitu
# imports no algorithm). The packages that own the algorithms fill it through entry
# points (KERNEL_GROUP), read on the registry's first use; register() adds more.
_REGISTRY: dict[str, Any] = {}
_discovered = False
_REGISTRY_LOCK = threading.Lock()


def is_kernel_name(x: Any) -> bool:
    """Whether `x` has the form of a registry name (dotted identifiers, no spaces),
    which no CUDA source has."""
    return isinstance(x, str) and _NAME_RE.fullmatch(x) is not None


_REF_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def _discover() -> None:
    """Add the kernels installed packages declare (KERNEL_GROUP) to the registry, once.

    Called with _REGISTRY_LOCK held. A name already registered keeps its function; a
    malformed declaration is skipped with a warning (one broken package does not take
    the others' kernels away).
    """
    global _discovered
    if _discovered:
        return
    _discovered = True
    for name, ref in plugins.declared(KERNEL_GROUP).items():
        if not is_kernel_name(name) or not _REF_RE.fullmatch(ref):
            warnings.warn(f"entry point {name!r} = {ref!r} in group {KERNEL_GROUP!r}: expected a dotted name "
                          "and 'module:attribute'; ignored", RuntimeWarning, stacklevel=4)
            continue
        _REGISTRY.setdefault(name, ref)


def register(name: str, fn: Callable | str, *, replace: bool = False) -> None:
    """Register an algorithm under `name` for :func:`exec_kernel` / ``exec_gpu``.

    A package that ships kernels declares them instead as entry points in the group
    ``insitu.kernels`` of its ``pyproject.toml`` (``"contour.marching_cubes" =
    "package.module:function"``), so they are known wherever it is installed.

    Parameters
    ----------
    name : str
        Dotted identifiers, ``"halo.extract"``.
    fn : callable or str
        The function, or ``"package.module:attribute"`` to import on first lookup.
    replace : bool
        Allow replacing a different function registered (or declared) under `name`.
    """
    if not is_kernel_name(name):
        raise ValueError(f"kernel name {name!r}: expected dotted identifiers like 'contour.marching_cubes'")
    if isinstance(fn, str):
        if not _REF_RE.fullmatch(fn):
            raise ValueError(f"{name}: expected a callable or 'module:attribute', got {fn!r}")
    elif not callable(fn):
        raise TypeError(f"{name}: expected a callable or 'module:attribute', got {type(fn).__name__}")
    with _REGISTRY_LOCK:
        _discover()
        old = _REGISTRY.get(name)
        if old is not None and old is not fn and old != fn and not replace:
            raise ValueError(f"kernel name {name!r} is already registered ({old!r}); pass replace=True")
        _REGISTRY[name] = fn


def unregister(name: str) -> None:
    """Remove `name` from the registry (KeyError if unknown)."""
    with _REGISTRY_LOCK:
        _discover()
        if name not in _REGISTRY:
            raise KeyError(_unknown(name))
        del _REGISTRY[name]


def names() -> list[str]:
    """The registered names (those declared by installed packages included), sorted."""
    with _REGISTRY_LOCK:
        _discover()
        return sorted(_REGISTRY)


def _unknown(name: str) -> str:
    return (f"unknown kernel name {name!r}; registered: {', '.join(sorted(_REGISTRY)) or 'none'} (packages "
            f"declare kernels as entry points in group {KERNEL_GROUP!r}; is the one providing it installed?)")


def lookup(name: str) -> Callable:
    """The function registered under `name`, importing its module on first use.

    Raises
    ------
    KeyError
        `name` is not registered; the message lists the registered names.
    """
    with _REGISTRY_LOCK:
        fn = _REGISTRY.get(name)
        if fn is None:
            _discover()
            if name not in _REGISTRY:
                raise KeyError(_unknown(name))
            fn = _REGISTRY[name]
    if isinstance(fn, str):
        mod_name, attr = fn.split(":")
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        with _REGISTRY_LOCK:
            if _REGISTRY.get(name) == fn:
                _REGISTRY[name] = obj
        fn = obj
    return fn


# --------------------------------------------------------------------------- launching


def _dim3(x: Any, what: str) -> tuple[int, ...]:
    t = (x,) if isinstance(x, (int, np.integer)) else tuple(x)
    if not 1 <= len(t) <= 3 or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in t):
        raise ValueError(f"{what}: expected 1 to 3 positive ints, got {x!r}")
    return tuple(int(v) for v in t)


def _first_size(args: Sequence) -> int | None:
    for a in args:
        if isinstance(a, np.ndarray) or arrays.is_device_array(a):
            shape = getattr(a, "shape", None)
            return int(np.prod(arrays.asarray(a).shape if shape is None else shape))
    return None


def _launch_config(grid, block, args: Sequence, *, name: str) -> tuple[tuple | None, tuple]:
    """``(grid, block)`` as tuples; grid None: 1-D over the first array argument
    (``(None, block)`` when that array is empty)."""
    block = _dim3(DEFAULT_BLOCK if block is None else block, f"{name}: block")
    if grid is not None:
        return _dim3(grid, f"{name}: grid"), block
    if len(block) != 1:
        raise ValueError(f"{name}: give grid= with a {len(block)}-D block (only a 1-D grid is derived)")
    n = _first_size(args)
    if n is None:
        raise ValueError(f"{name}: give grid=; there is no array argument to size a 1-D grid from")
    return ((-(-n // block[0]),) if n else None), block


def _device_args(args: Sequence, name: str) -> tuple:
    """Arguments for a CUDA source kernel: CuPy arrays and scalars as they are, other
    device arrays wrapped as CuPy (no copy); host arrays refused."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, np.generic) or isinstance(a, (bool, int, float, complex)):
            out.append(a)
        elif arrays.is_device_array(a):
            out.append(arrays.asarray(a, name=f"{name}: args[{i}]"))
        elif (isinstance(a, (np.ndarray, memoryview, bytearray)) or hasattr(a, "__array_interface__")
              or hasattr(a, "__dlpack__")):
            raise TypeError(
                f"CUDA kernel {name!r}: args[{i}] is a host array ({type(a).__name__}); CUDA source kernels "
                "take device arrays (CuPy, or __cuda_array_interface__ / DLPack on CUDA); copying it to the "
                "device is left to the caller (insitu.to_device)")
        else:
            out.append(a)
    return tuple(out)


def _is_cupy_kernel(k: Any) -> bool:
    t = type(k)
    return t.__module__.startswith("cupy") and t.__name__ in ("RawKernel", "Function")


def _is_numba_cuda(k: Any) -> bool:
    mod = type(k).__module__
    return mod.startswith(("numba.cuda", "numba_cuda")) and hasattr(k, "__getitem__")


def exec_kernel(cache: KernelCache | None, kernel: Any, function_name: str | None = None, args: Sequence = (), *,
                kwargs: Mapping[str, Any] | None = None, grid=None, block=None, options: Sequence[str] = (),
                name_expressions: Sequence[str] = (), shared_mem: int = 0, stream=None) -> Any:
    """Run a kernel: CUDA source, a Python/Numba/CuPy callable, or a registered name.

    Parameters
    ----------
    cache : KernelCache or None
        Where CUDA sources are compiled; None: :func:`default_cache`.
    kernel : str or callable
        - a registered name (dotted identifiers, see :func:`register`): the function
          is called ``fn(*args, **kwargs)``;
        - any other str: CUDA source, compiled through `cache` and launched with
          `grid`, `block` on `args` (CuPy arrays, and NumPy scalars of the kernel's
          parameter types: a Python int goes as a 64-bit integer, a float as a double;
          returns None);
        - a CuPy ``RawKernel`` or Numba ``@cuda.jit`` kernel: launched likewise;
        - another callable (Numba ``@njit``, Python, CuPy ``ElementwiseKernel``):
          called ``fn(*args, **kwargs)``.
    function_name : str, optional
        The kernel in CUDA source (required there; ignored otherwise).
    args : sequence
        Arguments, passed as they are (no copies).
    kwargs : mapping, optional
        Keyword arguments for callables and registered names.
    grid, block : int or tuple, optional
        Launch shape of CUDA kernels; without `grid`, a 1-D grid covers the first
        array argument's elements with `block` (default 256) threads per block.
    options, name_expressions : sequence of str
        NVRTC options and name expressions of CUDA source (see :meth:`KernelCache.get`).
    shared_mem : int
        Dynamic shared memory of CUDA kernels, in bytes.
    stream : optional
        CuPy stream (or Numba stream, for Numba kernels) to launch on.

    Returns
    -------
    The function's result; None for CUDA kernels (they write into their arguments).

    Raises
    ------
    KeyError
        Unknown registered name.
    DeviceUnavailableError
        CUDA source or a CuPy kernel without CuPy and a CUDA device.
    TypeError
        A host (NumPy) array given to CUDA source; launch settings given to a callable.
    KernelCompileError, KernelNotFoundError
        See :meth:`KernelCache.get`.
    """
    cache = default_cache() if cache is None else cache
    args = tuple(args)
    kwargs = dict(kwargs or {})
    launch_settings = {"grid": grid, "block": block, "options": tuple(options),
                       "name_expressions": tuple(name_expressions), "shared_mem": shared_mem, "stream": stream}

    if isinstance(kernel, str) and not is_kernel_name(kernel):  # CUDA source
        if not function_name:
            raise ValueError("CUDA source given without function_name (the __global__ function to launch)")
        if kwargs:
            raise TypeError(f"CUDA kernel {function_name!r} takes positional args only, got kwargs {sorted(kwargs)}")
        _require_cupy(f"CUDA kernel {function_name!r}")
        dev_args = _device_args(args, function_name)
        fn = cache.get(kernel, function_name, options=options, name_expressions=name_expressions)
        cache.launch(fn, grid, block, dev_args, shared_mem, stream)
        return None

    if _is_cupy_kernel(kernel) or _is_numba_cuda(kernel):
        name = getattr(kernel, "name", None) or getattr(kernel, "__name__", type(kernel).__name__)
        _refuse(name, "a compiled CuPy / Numba CUDA kernel", kwargs=kwargs, options=tuple(options),
                name_expressions=tuple(name_expressions))
        cache.get_callable(kernel)
        if _is_cupy_kernel(kernel):
            _require_cupy(f"CUDA kernel {name!r}")
            cache.launch(kernel, grid, block, _device_args(args, name), shared_mem, stream)
            return None
        g, b = _launch_config(grid, block, args, name=name)
        if g is not None:
            cfg = (g, b) if stream is None and not shared_mem else (g, b, stream or 0, int(shared_mem))
            kernel[cfg](*args)
        return None

    if isinstance(kernel, str):  # a registered name
        fn = lookup(kernel)
        _refuse(kernel, "a registered (Python) function", **launch_settings)
        return cache.get_callable(fn)(*args, **kwargs)

    if callable(kernel):
        _refuse(getattr(kernel, "__name__", type(kernel).__name__), "a Python callable", **launch_settings)
        return cache.get_callable(kernel)(*args, **kwargs)

    raise TypeError(f"kernel: expected CUDA source (str), a registered name or a callable, "
                    f"got {type(kernel).__name__}")


def _refuse(name: str, kind: str, **given: Any) -> None:
    """TypeError for settings that do not apply to this kind of kernel."""
    bad = sorted(k for k, v in given.items() if v is not None and not (isinstance(v, (int, tuple, dict)) and not v))
    if bad:
        raise TypeError(f"{name}: {', '.join(bad)} do not apply to {kind}")
