"""Python side of the C ABI (``adaptors/include/insitu_adaptor.h``).

``libinsitu_adaptor`` describes the C structs as plain Python values (a list of domain
dicts holding ints, floats, strings and addresses) and calls the functions below. They
turn addresses into arrays **without copying** (NumPy views of host memory, CuPy views of
CUDA device memory, strides as given), build the Conduit Mesh Blueprint dicts and call
the adaptor module: :mod:`adaptors` by default, or the module named by
``$INSITU_ADAPTOR`` (any module with ``initialize, execute, results, finalize``).

Every function returns ``(status, message, value)`` and never raises: ``status`` is a
:class:`Status` code of the header, ``message`` says what went wrong ("" on success); on
failure ``value`` tells whether the adaptor has printed the error itself (the C library
prints the others, once, with the rank).

:func:`mesh_from_description` is the translation alone (pure, usable from tests).
"""

from __future__ import annotations

import ctypes
import enum
import importlib
import math
import os
import sys
import traceback
from typing import Any, Callable

import numpy as np

from .errors import MeshError  # the adaptor's own: one class for a bad mesh wherever it is found

__all__ = [
    "DTYPES",
    "MeshError",
    "Status",
    "execute",
    "execute_mesh",
    "finalize",
    "get_iso_count",
    "get_iso_value",
    "get_param",
    "initialize",
    "mesh_from_description",
    "results",
]


class Status(enum.IntEnum):
    """``insitu_status`` of the header (kept equal by tests/test_capi.py)."""

    OK = 0
    ERR_ARGUMENT = 1
    ERR_CONFIG = 2
    ERR_MESH = 3
    ERR_DEVICE_UNAVAILABLE = 4
    ERR_NOT_INITIALIZED = 5
    ERR_EXECUTE = 6
    ERR_NOT_FOUND = 7
    ERR_PYTHON = 8


#: ``insitu_dtype`` code -> (header name, NumPy dtype)
DTYPES = {
    1: ("INSITU_FLOAT32", np.dtype(np.float32)),
    2: ("INSITU_FLOAT64", np.dtype(np.float64)),
    3: ("INSITU_INT8", np.dtype(np.int8)),
    4: ("INSITU_INT16", np.dtype(np.int16)),
    5: ("INSITU_INT32", np.dtype(np.int32)),
    6: ("INSITU_INT64", np.dtype(np.int64)),
    7: ("INSITU_UINT8", np.dtype(np.uint8)),
    8: ("INSITU_UINT16", np.dtype(np.uint16)),
    9: ("INSITU_UINT32", np.dtype(np.uint32)),
    10: ("INSITU_UINT64", np.dtype(np.uint64)),
}
ASSOCIATIONS = {1: ("INSITU_VERTEX", "vertex"), 2: ("INSITU_ELEMENT", "element")}
MEMORY_HOST, MEMORY_CUDA = 0, 1
MEMORIES = {MEMORY_HOST: "INSITU_MEMORY_HOST", MEMORY_CUDA: "INSITU_MEMORY_CUDA"}
LAYOUT_C, LAYOUT_FORTRAN, LAYOUT_STRIDED = 1, 2, 3
LAYOUTS = {LAYOUT_C: "INSITU_LAYOUT_C", LAYOUT_FORTRAN: "INSITU_LAYOUT_FORTRAN",
           LAYOUT_STRIDED: "INSITU_LAYOUT_STRIDED"}
AXES = "ijk"


def _choices(table: dict) -> str:
    return ", ".join(f"{v[0] if isinstance(v, tuple) else v}={k}" for k, v in table.items())


# --------------------------------------------------------------------------- arrays


def _span(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """Bytes from the first to past the last element (strides >= 0)."""
    if any(n == 0 for n in shape):
        return 0
    return sum((n - 1) * s for n, s in zip(shape, strides)) + itemsize


def _host_array(addr: int, shape: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...]) -> np.ndarray:
    """A read-only NumPy view of host memory at `addr` (no copy)."""
    span = _span(shape, strides, dtype.itemsize)
    buf = (ctypes.c_char * span).from_address(addr)
    a = np.ndarray(shape, dtype=dtype, buffer=buf, strides=strides)
    a.flags.writeable = False  # the simulation's memory: pipelines read it, never write it
    return a


class _CudaArrayInterface:
    """Only ``__cuda_array_interface__`` (used to get :mod:`insitu.arrays`' own error)."""

    def __init__(self, addr, shape, dtype, strides):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (addr, True),
                                         "strides": strides, "version": 3}


def _device_array(addr: int, shape, dtype: np.dtype, strides, device: int, where: str):
    """A CuPy view of CUDA memory at `addr` on `device` (no copy, no synchronization)."""
    from insitu import arrays

    cp = arrays.cupy_or_none()
    if cp is None:
        try:  # the library's one wording of "device array without a usable CUDA"
            arrays.asarray(_CudaArrayInterface(addr, shape, dtype, strides), name=where)
        except arrays.DeviceUnavailableError as exc:
            raise arrays.DeviceUnavailableError(
                f"{exc} (memory=INSITU_MEMORY_CUDA; pass host memory with INSITU_MEMORY_HOST)") from None
        raise arrays.DeviceUnavailableError(f"{where}: CUDA memory given but CuPy is not usable")
    ndev = cp.cuda.runtime.getDeviceCount()
    if not 0 <= device < ndev:
        raise MeshError(f"{where}: device={device}, this process sees CUDA devices 0..{ndev - 1}")
    span = _span(shape, strides, dtype.itemsize)
    with cp.cuda.Device(device):
        mem = cp.cuda.UnownedMemory(addr, span, None, device)
        return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(mem, 0), strides=strides)


def _pointer_kind(addr: int) -> tuple[int, int] | None:
    """``(cudaMemoryType, device)`` of `addr` when CUDA is usable, else ``None``."""
    from insitu import arrays

    cp = arrays.cupy_or_none()
    if cp is None:
        return None
    try:
        attrs = cp.cuda.runtime.pointerGetAttributes(addr)
    except Exception:  # older CUDA: unregistered host memory is an error
        return (0, -1)
    return int(attrs.type), int(attrs.device)


# --------------------------------------------------------------------------- translation


def _field_array(f: dict, where: str, domain_dims: tuple[int, int, int], problems: list[str]):
    """Check one field description; return its array, or None (problems appended)."""
    before = len(problems)
    assoc = ASSOCIATIONS.get(f["association"])
    dtype = DTYPES.get(f["dtype"], (None, None))[1]
    layout = f["layout"]
    memory = f["memory"]
    if assoc is None:
        problems.append(f"{where}: association={f['association']} is not one of {_choices(ASSOCIATIONS)}")
    if dtype is None:
        problems.append(f"{where}: dtype={f['dtype']} is not one of {_choices(DTYPES)}")
    if memory not in MEMORIES:
        problems.append(f"{where}: memory={memory} is not one of {_choices(MEMORIES)}")
    if layout not in LAYOUTS:
        problems.append(f"{where}: layout={layout} is not one of {_choices(LAYOUTS)}")
    if memory == MEMORY_CUDA and f["device"] < 0:
        problems.append(f"{where}: device={f['device']} is negative")
    if not f["data"]:
        problems.append(f"{where}: data is NULL")
    if assoc is None or dtype is None or layout not in LAYOUTS:
        return None
    shape = tuple(domain_dims) if assoc[1] == "vertex" else tuple(n - 1 for n in domain_dims)
    if assoc[1] == "element" and min(shape) < 1:
        problems.append(f"{where}: an element field needs at least 2 vertices along each axis, domain dims are "
                        f"{tuple(domain_dims)}")
        return None
    dims = tuple(f["dims"])
    if any(dims) and dims != shape:
        problems.append(f"{where}: dims={dims}, a {assoc[1]} field of this domain has dims {shape}")
    item = dtype.itemsize
    strides = tuple(f["strides"])
    if layout == LAYOUT_STRIDED:
        if any(s <= 0 for s in strides):
            problems.append(f"{where}: strides={strides} (bytes) must all be > 0 with INSITU_LAYOUT_STRIDED")
        elif any(s % item for s in strides):
            problems.append(f"{where}: strides={strides} (bytes) must be multiples of the item size {item}")
    else:
        ni, nj, nk = shape
        derived = (nj * nk * item, nk * item, item) if layout == LAYOUT_C else (item, ni * item, ni * nj * item)
        if any(strides) and strides != derived:
            problems.append(f"{where}: strides={strides} given with {LAYOUTS[layout]} (which implies {derived}); "
                            "use INSITU_LAYOUT_STRIDED for other strides")
        strides = derived
    if f["data"] and f["data"] % item:
        problems.append(f"{where}: data=0x{f['data']:x} is not aligned to its item size {item}")
    if len(problems) > before or memory not in MEMORIES:
        return None
    kind = _pointer_kind(f["data"])
    if memory == MEMORY_HOST:
        if kind is not None and kind[0] == 2:
            problems.append(f"{where}: data=0x{f['data']:x} is CUDA device memory (device {kind[1]}) but memory="
                            "INSITU_MEMORY_HOST; pass memory=INSITU_MEMORY_CUDA")
            return None
        return _host_array(f["data"], shape, dtype, strides)
    if kind is not None and kind[0] not in (2, 3):
        problems.append(f"{where}: data=0x{f['data']:x} is not CUDA device or managed memory but memory="
                        "INSITU_MEMORY_CUDA")
        return None
    if kind is not None and kind[0] == 2 and kind[1] != f["device"]:
        problems.append(f"{where}: data=0x{f['data']:x} is on CUDA device {kind[1]} but device={f['device']}")
        return None
    try:
        return _device_array(f["data"], shape, dtype, strides, f["device"], where)
    except MeshError as exc:
        problems.append(str(exc))
        return None


def mesh_from_description(domains: list[dict], step: int, time: float) -> list[dict]:
    """Conduit Mesh Blueprint dicts (one per domain) from the C library's description.

    Parameters
    ----------
    domains : list of dict
        What ``insitu_execute`` builds from an ``insitu_mesh``: per domain ``domain_id``,
        ``dims`` (3 ints), ``origin``, ``spacing`` (3 floats) and ``fields``, a list of dicts
        with ``name, association, dtype, memory, device, layout, dims, strides, data``
        (the header's codes; ``data`` an address).
    step, time : int, float
        The cycle and time of the step (``state/cycle``, ``state/time``).

    Returns
    -------
    list of dict
        Blueprint domains whose ``fields/<name>/values`` are views of the caller's memory,
        indexed ``[i, j, k]``: read-only NumPy arrays or CuPy arrays.

    Raises
    ------
    MeshError
        Listing every problem with its path (``domains[0] (domain_id 3)/fields[1] 'T': ...``).
    insitu.arrays.DeviceUnavailableError
        A field is in CUDA memory and CuPy or a CUDA device is not usable.
    """
    from insitu.arrays import DeviceUnavailableError

    problems: list[str] = []
    unavailable: list[DeviceUnavailableError] = []
    out = []
    ids: dict[int, int] = {}
    for n, d in enumerate(domains):
        where = f"domains[{n}] (domain_id {d['domain_id']})"
        dims = tuple(int(v) for v in d["dims"])
        bad = len(problems)
        if any(v < 1 for v in dims):
            problems.append(f"{where}: dims={dims}, each must be >= 1 (vertices along i, j, k)")
        if any(not (math.isfinite(s) and s > 0) for s in d["spacing"]):
            problems.append(f"{where}: spacing={tuple(d['spacing'])}, each must be finite and > 0")
        if any(not math.isfinite(o) for o in d["origin"]):
            problems.append(f"{where}: origin={tuple(d['origin'])} is not finite")
        if d["domain_id"] < 0:
            problems.append(f"{where}: domain_id={d['domain_id']} is negative")
        elif d["domain_id"] in ids:
            problems.append(f"{where}: domain_id {d['domain_id']} repeats domains[{ids[d['domain_id']]}]")
        ids.setdefault(d["domain_id"], n)
        if len(problems) > bad:
            continue
        fields: dict[str, Any] = {}
        for m, f in enumerate(d["fields"]):
            fwhere = f"{where}/fields[{m}] '{f['name']}'"
            if not f["name"]:
                problems.append(f"{fwhere}: name is empty")
                continue
            if f["name"] in fields:
                problems.append(f"{fwhere}: name repeats another field of this domain")
                continue
            try:
                values = _field_array(f, fwhere, dims, problems)
            except DeviceUnavailableError as exc:  # reported after the mesh's own problems
                unavailable.append(exc)
                values = None
            fields[f["name"]] = {
                "association": ASSOCIATIONS.get(f["association"], ("", "?"))[1],
                "topology": "mesh",
                "values": values,
            }
        x0, y0, z0 = (float(v) for v in d["origin"])
        dx, dy, dz = (float(v) for v in d["spacing"])
        out.append({
            "coordsets": {"coords": {"type": "uniform", "dims": dict(zip(AXES, dims)),
                                     "origin": {"x": x0, "y": y0, "z": z0},
                                     "spacing": {"dx": dx, "dy": dy, "dz": dz}}},
            "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
            "fields": fields,
            "state": {"domain_id": int(d["domain_id"]), "cycle": int(step), "time": float(time)},
        })
    if problems:
        raise MeshError("invalid mesh: " + "; ".join(problems))
    if unavailable:
        raise unavailable[0]
    return out


# --------------------------------------------------------------------------- adaptor calls

_impl = None  # the adaptor module of the current initialize


def _load_implementation():
    name = os.environ.get("INSITU_ADAPTOR") or "adaptors"
    mod = importlib.import_module(name)
    missing = [f for f in ("initialize", "execute", "results", "finalize") if not callable(getattr(mod, f, None))]
    if missing:
        raise ImportError(f"adaptor module {name!r} ({getattr(mod, '__file__', '?')}) has no "
                          f"{', '.join(missing)}; set INSITU_ADAPTOR to a module that has them")
    return mod


class _NotInitialized(RuntimeError):
    """An entry point other than initialize ran without a successful initialize."""


class _ExecuteFailed(RuntimeError):
    """The adaptor's execute returned False (its errors are in results()['errors'])."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors) or "the adaptor's execute returned False")
        # The adaptor records "step N: MeshError: ..." for a mesh it rejects (a field a
        # pipeline needs is missing, say): report those as mesh errors.
        self.mesh = bool(errors) and all(": MeshError: " in e or e.startswith("MeshError: ") for e in errors)


class _Rejected(MeshError):
    """A mesh the C library rejected before describing it (``status``: its code)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = Status(status)


def _status_of(exc: BaseException, *, during: str) -> Status:
    from insitu.arrays import DeviceUnavailableError

    if isinstance(exc, _Rejected):
        return exc.status
    if isinstance(exc, MeshError):
        return Status.ERR_MESH
    if isinstance(exc, DeviceUnavailableError):
        return Status.ERR_DEVICE_UNAVAILABLE
    if isinstance(exc, _NotInitialized):
        return Status.ERR_NOT_INITIALIZED
    if isinstance(exc, _ExecuteFailed):
        return Status.ERR_MESH if exc.mesh else Status.ERR_EXECUTE
    if isinstance(exc, _NotFound):
        return Status.ERR_NOT_FOUND
    impl = _impl or sys.modules.get(os.environ.get("INSITU_ADAPTOR") or "adaptors")
    for attr, status in (("ConfigError", Status.ERR_CONFIG), ("NotInitializedError", Status.ERR_NOT_INITIALIZED),
                         ("MeshError", Status.ERR_MESH)):
        cls = getattr(impl, attr, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return status
    if during == "initialize" and isinstance(exc, OSError):
        return Status.ERR_CONFIG  # unreadable configuration file
    adaptor_error = getattr(impl, "AdaptorError", None)
    if during == "finalize" and isinstance(adaptor_error, type) and isinstance(exc, adaptor_error):
        return Status.ERR_EXECUTE  # a stream or renderer failed to close (the others were closed)
    if during == "adaptor.execute":
        return Status.ERR_EXECUTE  # a pipeline's error, forwarded (`exceptions: forward`)
    return Status.ERR_PYTHON


def _describe(exc: BaseException, status: Status) -> str:
    if isinstance(exc, (MeshError, _NotInitialized, _ExecuteFailed, _NotFound)) or status in (
            Status.ERR_CONFIG, Status.ERR_DEVICE_UNAVAILABLE, Status.ERR_NOT_INITIALIZED):
        return str(exc)
    text = f"{type(exc).__name__}: {exc}"
    if status == Status.ERR_PYTHON:
        frames = traceback.extract_tb(exc.__traceback__)[-3:]
        if frames:
            text += " [at " + " <- ".join(f"{os.path.basename(fr.filename)}:{fr.lineno} in {fr.name}"
                                          for fr in reversed(frames)) + "]"
    return text


def _guard(during: str, fn: Callable[[], Any]) -> tuple[int, str, Any]:
    """Run `fn`; ``(OK, "", value)`` or ``(status, message, None)``; flushes stdout."""
    try:
        return int(Status.OK), "", fn()
    except BaseException as exc:  # nothing may reach the simulation
        status = _status_of(exc, during=getattr(exc, "_insitu_during", during))
        # value: whether the adaptor has printed the error already (it logs what it records)
        return int(status), _describe(exc, status), isinstance(exc, _ExecuteFailed) or bool(
            getattr(exc, "_insitu_reported", False))
    finally:
        # The embedded interpreter is never finalized: flush so output is not lost.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass


def _require():
    if _impl is None:
        raise _NotInitialized("the adaptor is not initialized (insitu_initialize did not succeed)")
    return _impl


def initialize(config_path: str, comm_handle: int) -> tuple[int, str, Any]:
    """``insitu_initialize``: the communicator arrives as its Fortran handle."""

    def run():
        global _impl
        from mpi4py import MPI

        _impl = None
        impl = _load_implementation()
        comm = MPI.Comm.f2py(int(comm_handle))
        impl.initialize(config_path, comm=comm)
        _impl = impl

    return _guard("initialize", run)


def _errors(impl) -> list:
    try:
        return list(impl.results().get("errors") or [])
    except Exception:
        return []


def _accepts_error(fn: Callable) -> bool:
    """Whether an adaptor's ``execute`` takes ``error=`` (the adaptor's own does; a stand-in
    module may not, and then has no collectives to join)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "error" or p.kind == p.VAR_KEYWORD for p in params)


def _join_step(impl, step: int, time: float, exc: BaseException) -> None:
    """Hand a mesh this rank rejected to the adaptor's ``execute`` as its error: the other
    ranks are running this step's collectives, and the adaptor agrees the failure with
    them, so every rank fails the step and all of them go on to the next one together."""
    if not _accepts_error(impl.execute):
        return
    given = MeshError(str(exc)) if isinstance(exc, _Rejected) else exc
    try:
        impl.execute(int(step), float(time), None, error=given)
    except Exception:  # `exceptions: forward` raises it back; `exc` is reported below
        pass
    exc._insitu_reported = True  # the adaptor logged the step's failure (it logs what it records)


def execute(step: int, time: float, domains: list[dict] | None, problem_status: int = 0,
            problem: str = "") -> tuple[int, str, Any]:
    """``insitu_execute``: build the Blueprint domains and run the adaptor on them.

    ``problem_status``/``problem``: what the C library found wrong with the mesh before
    describing it (a NULL mesh, NULL arrays); the step then fails like an invalid mesh.
    A rejected mesh still goes to the adaptor (as its ``error``), so this rank takes part
    in the step the other ranks run and every rank gets an error code for it.
    """

    def run():
        impl = _require()
        try:
            if problem_status:
                raise _Rejected(problem_status, problem)
            mesh = mesh_from_description(domains, step, time)
        except Exception as exc:
            _join_step(impl, step, time, exc)
            raise
        n0 = len(_errors(impl))
        try:
            ok = impl.execute(int(step), float(time), mesh)
        except BaseException as exc:
            exc._insitu_during = "adaptor.execute"
            raise
        if ok is False:
            errs = _errors(impl)
            new = errs[n0:] if len(errs) > n0 else errs[-1:]
            raise _ExecuteFailed([str(e) for e in new])

    return _guard("execute", run)


def execute_mesh(step: int, time: float, mesh, problem_status: int = 0, problem: str = "") -> tuple[int, str, Any]:
    """:func:`execute` for a caller that has the Blueprint mesh itself (the Catalyst
    implementation, :mod:`adaptors.catalyst`): a dict, or a Mapping that builds the
    domains when the adaptor first reads them (not at all on a step where nothing is due).

    ``problem_status``/``problem``: what the caller found wrong before the mesh; the step
    then fails on every rank like an invalid mesh (this rank still joins it).
    """

    def run():
        impl = _require()
        if problem_status:
            exc = _Rejected(problem_status, problem)
            _join_step(impl, step, time, exc)
            raise exc
        try:
            ok = impl.execute(int(step), float(time), mesh)
        except BaseException as exc:
            exc._insitu_during = "adaptor.execute"
            raise
        if ok is False:  # the adaptor records one message for a failed step: the newest
            raise _ExecuteFailed([str(e) for e in _errors(impl)[-1:]])

    return _guard("execute", run)


def results() -> tuple[int, str, Any]:
    """``insitu_results``: ``(stop, nerrors, step, nparams)``."""

    def run():
        r = _require().results()
        step = r.get("step")
        return (int(bool(r.get("stop"))), len(r.get("errors") or []), -1 if step is None else int(step),
                len(r.get("params") or {}))

    return _guard("results", run)


class _NotFound(LookupError):
    """A getter's name or index is unknown to the adaptor's results."""


def _names(d: dict) -> str:
    return ", ".join(repr(k) for k in d) if d else "none"


def _lookup(fn: Callable[[], Any]) -> tuple[int, str, Any]:
    return _guard("results", fn)


def get_param(name: str) -> tuple[int, str, Any]:
    """``insitu_get_param``: a steering parameter by name."""

    def run():
        params = dict(_require().results().get("params") or {})
        if name not in params:
            raise _NotFound(f"no steering parameter {name!r}; parameters: {_names(params)}")
        return float(params[name])

    return _lookup(run)


def _iso_values(pipeline: str) -> list[float]:
    isos = dict(_require().results().get("iso_values") or {})
    if pipeline not in isos:
        raise _NotFound(f"no iso values for pipeline {pipeline!r}; pipelines with iso values: {_names(isos)}")
    return [float(v) for v in isos[pipeline]]


def get_iso_count(pipeline: str) -> tuple[int, str, Any]:
    """``insitu_get_iso_count``: number of iso values of a contour pipeline."""
    return _lookup(lambda: len(_iso_values(pipeline)))


def get_iso_value(pipeline: str, index: int) -> tuple[int, str, Any]:
    """``insitu_get_iso_value``: iso value `index` (0-based) of a contour pipeline."""

    def run():
        values = _iso_values(pipeline)
        if not 0 <= index < len(values):
            raise _NotFound(f"pipeline {pipeline!r} has {len(values)} iso value(s); index {index} is out of range")
        return values[index]

    return _lookup(run)


def finalize() -> tuple[int, str, Any]:
    """``insitu_finalize``."""

    def run():
        global _impl
        impl, _impl = _require(), None
        impl.finalize()

    return _guard("finalize", run)
