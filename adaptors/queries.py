"""Ascent's queries (``add_queries``) and the mesh side of expressions.

::

    - action: add_queries
      queries:
        q1: {params: {expression: "max(field('T'))", name: "max_T"}}
        q2: {params: {expression: "max_T - history(max_T, relative_index = 1) > 100", name: "jump"}}

Every executed cycle the queries run in the order given, before the triggers; each value is
kept per cycle (a cycle executed twice keeps its last value), named in later expressions
(``max_T``), reached back through ``history(...)``, and the newest is in
``results()["queries"]`` as plain Python (:func:`adaptors.expressions.plain`).

:class:`MeshData` computes the reductions expressions ask for over every real cell or node
of every domain of every rank: each is a collective through :class:`adaptors.context.Context`
(every rank evaluates the same expressions, hence calls the same collectives in the same
order).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, Mapping

import numba
import numpy as np

from insitu import arrays

from .errors import MeshError
from .expressions import AABB, BUILTIN_NAMES, Env, Histogram, ValuePosition, Vector, evaluate, parse, plain

__all__ = ["MeshData", "Queries", "validate"]


class MeshData:
    """Global reductions of one step's domains for :func:`adaptors.expressions.evaluate`;
    every method is collective over `ctx`.

    Parameters
    ----------
    domains : list of MeshDomain or CellDomain
        This rank's domains (possibly none): grids, or points and cells.
    ctx : adaptors.context.Context
        The job's ranks.
    """

    def __init__(self, domains, ctx) -> None:
        self.domains, self.ctx = list(domains), ctx

    def _values(self, d, name: str):
        if name not in d.fields:
            raise MeshError(f"domain {d.domain_id}: no field {name!r}; fields: {', '.join(sorted(d.fields))}")
        return d.real_values(name)

    def reduce(self, name: str, op: str) -> float:
        """``sum`` or ``avg`` of field `name` (NaN ignored)."""
        return float(self.ctx.reduce_field(self.domains, name, op))

    def extreme(self, name: str, op: str) -> ValuePosition:
        """``max`` or ``min`` of field `name` (NaN ignored) and the world position of the node
        (vertex field) or cell centre (element field) holding it: the first such value of the
        lowest rank that has it."""
        best: tuple | None = None  # (value, position, domain_id, index, assoc)
        for d in self.domains:
            v = self._values(d, name)
            xp = arrays.get_array_module(v)
            if v.size == 0:
                continue
            ijk = self._arg(xp, v, op)
            value = float(arrays.scalar_to_host(v[ijk]))
            if math.isnan(value):
                # argmax/argmin stop at the first NaN: look again without them (a copy; rare)
                ijk = self._arg(xp, xp.where(xp.isnan(v), -xp.inf if op == "max" else xp.inf, v), op)
                value = float(arrays.scalar_to_host(v[ijk]))
                if math.isnan(value):
                    continue  # all NaN
            if best is not None and not (value > best[0] if op == "max" else value < best[0]):
                continue
            f = d.fields[name]
            pos, index = (_place_cells if hasattr(d, "mesh") else _place_grid)(d, f, ijk)
            best = (value, pos, int(d.domain_id), index, f.association)
        everyone = self.ctx.allgather(best, what=f"{op} of field {name!r}")
        rank, pick = -1, None
        for r, b in enumerate(everyone):
            if b is not None and (pick is None or (b[0] > pick[0] if op == "max" else b[0] < pick[0])):
                rank, pick = r, b
        if pick is None:
            return ValuePosition(-math.inf if op == "max" else math.inf, Vector(math.nan, math.nan, math.nan))
        return ValuePosition(pick[0], Vector(*pick[1]), rank, pick[2], pick[3], pick[4])

    @staticmethod
    def _arg(xp, v, op: str) -> tuple:
        """Index of the first largest (smallest) value of `v`: NumPy's argmax; on the device,
        in two stages over a 3-D view (CuPy reduces a strided view to one value in a single
        thread block): each row's extreme, the first row holding the largest, its place in
        that row. A NaN stands where NumPy's would stop (the caller looks again without NaN)."""
        arg = xp.argmax if op == "max" else xp.argmin
        if xp is np or v.ndim != 3:
            return np.unravel_index(int(arrays.scalar_to_host(arg(v))), v.shape)
        fill = -xp.inf if op == "max" else xp.inf
        if v.dtype.kind == "f":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN, filled below
                m = (xp.nanmax if op == "max" else xp.nanmin)(v, axis=-1)
            m = xp.where(xp.isnan(m), fill, m)
        else:
            m = (xp.max if op == "max" else xp.min)(v, axis=-1)
        i, j = divmod(int(arrays.scalar_to_host(arg(m))), v.shape[1])
        row = v[i, j]
        if v.dtype.kind == "f":
            row = xp.where(xp.isnan(row), fill, row)
        return i, j, int(arrays.scalar_to_host(arg(row)))

    def count(self, name: str, what: str) -> float:
        """How many values of field `name` are NaN (`what` ``nan``) or infinite (``inf``)."""
        n = 0
        for d in self.domains:
            v = self._values(d, name)
            if v.dtype.kind != "f":
                continue
            xp = arrays.get_array_module(v)
            n += int(arrays.scalar_to_host(xp.count_nonzero(xp.isnan(v) if what == "nan" else xp.isinf(v))))
        return float(self.ctx.allreduce([float(n)], "sum", what=f"{what} count of field {name!r}")[0])

    def histogram(self, name: str, num_bins: int, min_val: float | None, max_val: float | None) -> Histogram:
        """Counts of field `name` in `num_bins` equal bins over ``[min_val, max_val]`` (None:
        the field's global minimum/maximum, NaN ignored), as Ascent bins them: bin
        ``int((v - min_val) * num_bins / (max_val - min_val))``, clamped into the end bins;
        NaN values are left out."""
        if min_val is None or max_val is None:
            lo, hi = math.inf, -math.inf
            for d in self.domains:
                v = self._values(d, name)
                if v.size == 0:
                    continue
                xp = arrays.get_array_module(v)
                f = (xp.nanmin, xp.nanmax) if v.dtype.kind == "f" else (xp.min, xp.max)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all NaN: NaN, skipped below
                    a, b = (float(arrays.scalar_to_host(g(g(v, axis=-1)) if v.ndim > 1 else g(v))) for g in f)
                if not math.isnan(a):
                    lo, hi = min(lo, a), max(hi, b)
            m = self.ctx.allreduce([lo, -hi], "min", what=f"range of field {name!r} (histogram)")
            lo, hi = (m[0] if min_val is None else min_val), (-m[1] if max_val is None else max_val)
        else:
            lo, hi = min_val, max_val
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"histogram of field {name!r}: its range [{lo}, {hi}] is not finite; give min_val "
                             "and max_val")
        if not lo < hi:
            raise ValueError(f"histogram of field {name!r}: min_val ({lo}) must be smaller than max_val ({hi})")
        counts = np.zeros(num_bins, np.float64)
        scale = num_bins / (hi - lo)
        acc = None  # the counts of the domains on the device, summed there: one copy to the host
        for d in self.domains:
            v = self._values(d, name)
            if v.size == 0:
                continue
            xp = arrays.get_array_module(v)
            if xp is np:
                _histogram_cpu(v if v.ndim == 3 else v.reshape(1, 1, -1), lo, hi, scale, counts)
                continue
            c = _histogram_gpu(xp, v, lo, hi, scale, num_bins)
            acc = c if acc is None else acc + c
        if acc is not None:
            counts += arrays.to_host(acc)  # num_bins numbers
        total = self.ctx.allreduce(counts.tolist(), "sum", what=f"histogram of field {name!r}")
        return Histogram(np.asarray(total, np.float64).reshape(num_bins), float(lo), float(hi), int(num_bins))

    def bounds(self) -> AABB:
        """The world box of every rank's real cells."""
        b = self.ctx.bounds(self.domains)
        return AABB(Vector(b[0], b[2], b[4]), Vector(b[1], b[3], b[5]))


def _place_grid(d, f, ijk: tuple) -> tuple[list[float], int]:
    """World position and flat index (i fastest) in a MeshDomain's field of real value `ijk`:
    the node, or the cell's centre."""
    full = np.asarray(d.cells[0]) + np.asarray(ijk)  # index in the domain's whole array
    pos = d.origin + (full + (0.0 if f.association == "vertex" else 0.5)) * d.spacing
    shape = f.values.shape
    return [float(p) for p in pos], int(full[0] + shape[0] * (full[1] + shape[1] * full[2]))


def _place_cells(d, f, ijk: tuple) -> tuple[list[float], int]:
    """World position and point or cell id of real value `ijk` of a CellDomain's field: the
    point, or the mean of the cell's points (a few scalar reads on a device)."""
    k = int(ijk[0])
    m = d.mesh
    xp = arrays.get_array_module(m.points)
    if f.association == "element" and d.ghosts is not None:
        xg = arrays.get_array_module(d.ghosts)  # the ghosts may stay on the host beside device fields
        k = int(arrays.scalar_to_host(xg.flatnonzero(~d.ghosts)[k]))  # the k-th real cell
    if f.association == "vertex":
        p = m.points[k]
    else:
        a, b = arrays.scalars_to_host(m.offsets[k:k + 2])
        p = m.points[m.connectivity[a:b]].astype(xp.float64).mean(axis=0)
    return [float(v) for v in arrays.scalars_to_host(p)], k


@numba.njit(cache=True)
def _histogram_cpu(v, lo, hi, scale, counts):  # pragma: no cover (compiled)
    """Add the values of the 3-D (strided) array `v` to `counts`, in one pass: bin
    ``int((clip(x, lo, hi) - lo) * scale)``, the last bin holding ``hi``; NaN left out."""
    top = counts.shape[0] - 1
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            for k in range(v.shape[2]):
                x = float(v[i, j, k])
                if x != x:
                    continue
                x = min(max(x, lo), hi)
                counts[min(int((x - lo) * scale), top)] += 1.0


_HISTOGRAM_SRC = r"""
extern "C" __global__ void insitu_histogram_f64(const double* v, long long n, double lo, double hi, double scale,
                                                int nbins, unsigned long long* out)
{
    // One block's counts in shared memory, added to the global ones at the end: the atomics
    // of a few hundred bins would otherwise all meet in global memory.
    extern __shared__ unsigned int bins[];
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        double x = v[i];
        if (x != x) continue;  // NaN: left out
        x = fmin(fmax(x, lo), hi);
        int b = (int)((x - lo) * scale);
        atomicAdd(&bins[b < nbins ? b : nbins - 1], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x)
        if (bins[b]) atomicAdd(&out[b], (unsigned long long)bins[b]);
}
"""
#: Most bins counted in shared memory (4 bytes each); more: CuPy's bincount.
_SHARED_BINS = 8192


@functools.lru_cache(maxsize=None)
def _histogram_kernel():
    import cupy

    return cupy.RawKernel(_HISTOGRAM_SRC, "insitu_histogram_f64")


def _histogram_gpu(xp, v, lo: float, hi: float, scale: float, num_bins: int):
    """Counts (num_bins,) of device values `v` (any shape and strides), as :func:`_histogram_cpu`."""
    flat = xp.ascontiguousarray(v, dtype=xp.float64).ravel()  # one pass: the strided view and the dtype
    if num_bins > _SHARED_BINS:
        flat = flat[~xp.isnan(flat)]
        b = ((xp.clip(flat, lo, hi) - lo) * scale).astype(xp.int64)
        return xp.bincount(xp.minimum(b, num_bins - 1), minlength=num_bins)
    out = xp.zeros(num_bins, xp.uint64)
    n = flat.size
    sms = xp.cuda.Device().attributes["MultiProcessorCount"]
    blocks = max(1, min((n + 255) // 256, 8 * sms))
    _histogram_kernel()((blocks,), (256,), (flat, np.int64(n), np.float64(lo), np.float64(hi), np.float64(scale),
                                            np.int32(num_bins), out), shared_mem=4 * num_bins)
    return out


def validate(section: Any, problems: list[str]) -> dict:
    """Check the ``queries`` section ``{key: {params: {expression, name}}}``; return
    ``{key: {"expression": ..., "name": ...}}``, appending each problem (with its path)."""
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        problems.append(f"queries: expected a map of queries (name: {{params: {{expression, name}}}}), "
                        f"got {type(section).__name__}")
        return {}
    out: dict = {}
    names: dict[str, str] = {}
    for key, q in section.items():
        path = f"queries/{key}"
        if not isinstance(q, Mapping) or not isinstance(q.get("params"), Mapping):
            problems.append(f"{path}: expected {{params: {{expression, name}}}}")
            continue
        for k in q:
            if k == "pipeline":
                problems.append(f"{path}/pipeline: queries on a pipeline's output are not supported (they run on "
                                "the simulation's mesh)")
            elif k != "params":
                problems.append(f"{path}: unknown key {k!r}; known: params")
        p = q["params"]
        for k in p:
            if k not in ("expression", "name"):
                problems.append(f"{path}/params: unknown key {k!r}; known: expression, name")
        expr, name = p.get("expression"), p.get("name")
        if not isinstance(name, str) or not name:
            problems.append(f"{path}/params/name: expected a name, got {name!r}")
        elif name in BUILTIN_NAMES:
            problems.append(f"{path}/params/name: {name!r} is a built-in name ({', '.join(BUILTIN_NAMES)})")
        elif name in names:
            problems.append(f"{path}/params/name: {name!r} is also the name of queries/{names[name]}")
        else:
            names[name] = str(key)
        if not isinstance(expr, str):
            problems.append(f"{path}/params/expression: expected an expression, got {expr!r}")
            continue
        try:
            parse(expr)
        except ValueError as e:
            problems.append(f"{path}/params/expression: {e}")
            continue
        out[str(key)] = {"expression": expr, "name": name}
    for key, q in out.items():
        unknown = [n for n in parse(q["expression"]).names if n not in names]
        if unknown:
            problems.append(f"queries/{key}/params/expression: unknown identifier(s) {', '.join(map(repr, unknown))}; "
                            f"queries: {', '.join(names) or 'none'} (fields are written field('name'))")
    return out


class Queries:
    """The configuration's queries and their values, cycle by cycle.

    Parameters
    ----------
    section : mapping
        The validated ``queries`` section (:func:`validate`).
    """

    def __init__(self, section: Mapping[str, Mapping]) -> None:
        self._order = [(q["name"], q["expression"]) for q in section.values()]
        self._cycles: dict[str, list[int]] = {}
        #: name -> values, oldest first (what history() indexes).
        self.values: dict[str, list[Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._order)

    def run(self, cycle: int, time: float, data, param: Callable[[str], float] | None = None) -> None:
        """Evaluate every query, in order, and keep the values of this cycle (collective)."""
        for name, expr in self._order:
            value = evaluate(expr, Env(cycle, time, data, self.values, param))
            cycles, values = self._cycles.setdefault(name, []), self.values.setdefault(name, [])
            if cycles and cycles[-1] == cycle:  # the same cycle again: its value replaced (as Ascent's cache)
                values[-1] = value
            else:
                cycles.append(cycle)
                values.append(value)

    def env(self, cycle: int, time: float, data, param: Callable[[str], float] | None = None) -> Env:
        """What a trigger's condition sees: the queries' values so far."""
        return Env(cycle, time, data, self.values, param)

    def latest(self) -> dict:
        """``{name: newest value}`` as plain Python."""
        return {name: plain(v[-1]) for name, v in self.values.items() if v}

    def history(self) -> dict:
        """``{name: {cycle: value}}`` as plain Python."""
        return {name: {c: plain(v) for c, v in zip(self._cycles[name], vals)} for name, vals in self.values.items()}
