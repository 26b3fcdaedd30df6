"""Marching-cubes isosurfaces on NumPy arrays (Numba) and CuPy arrays (CUDA kernels).

One vertex per crossed grid edge, shared by the triangles that use it (an indexed
mesh), placed by linear interpolation; normals from the field's gradient at the same
place, pointing towards lower values; winding as scikit-image's default. Several iso
levels in one call, a second field sampled at the vertices, boundary surfaces of
integer labels, and blocks of a decomposed domain whose meshes merge into the
single-block mesh (vertices welded by their global grid edge).

Both backends run the same two passes (count per tile, scan, generate; see _cpu.py)
and number vertices and faces alike (_tables.TILE); on the GPU the mesh is written straight
into device arrays, a renderer's mapped buffers included, and nothing but a few counts
(one read) crosses to the host.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping, Sequence

import numpy as np

from insitu import arrays
from insitu.ranges import as_tile_ranges

from .. import _jit
from .._fields import check_volume
from . import _cpu, _gpu
from ._tables import chunk_planes, kernel_tables, tile_count

__all__ = ["label_surfaces", "marching_cubes", "marching_cubes_blocks"]

_INT32_MAX = 2**31 - 1


def _check_volume(volume, name: str = "volume"):
    # float64: an integer volume's levels stay exact
    return check_volume(volume, name, supported=_gpu.supported, fallback="float64")


def _check_values(values, shape, name: str):
    """A second field to sample: like the volume (its samples are checked where they are
    read: at the surface's edges, see _check_sampled)."""
    vals = _check_volume(values, name)
    if vals.shape != shape:
        raise ValueError(f"{name}: shape {vals.shape} differs from the volume's {shape}")
    return vals


def _check_sampled(vout, name: str) -> None:
    """Raise unless the values sampled at the vertices are finite (a NaN or inf at either
    end of a crossed edge makes its vertex's value non-finite)."""
    if len(vout) == 0:
        return
    ok = _all_finite()(vout) if arrays.is_device_array(vout) else np.isfinite(vout).all()
    if not arrays.scalar_to_host(ok):
        raise ValueError(f"{name}: contains NaN or inf where the surface samples it")


@functools.cache
def _all_finite():
    """Whether a (strided) device array is finite, in one pass with no temporary
    (``isfinite(x).all()`` writes a full-size bool array and reads it again)."""
    import cupy

    return cupy.ReductionKernel("T x", "bool y", "isfinite(x)", "a && b", "y = a", "true", "insitu_all_finite")


_tables_on: dict[int | None, Any] = {}  # device (None: host) -> kernel tables


def _device_tables(device):
    """The kernel tables on `device` (None: host's, _tables.kernel_tables; a device's:
    _gpu.tables), uploaded once."""
    if device not in _tables_on:
        host = kernel_tables()
        _tables_on[device] = host if device is None else arrays.to_device(_gpu.tables(*host[:2]))
    return _tables_on[device]


def _mesh(vol, levels, lo, hi, *, spacing, origin, ext=None, offset=(0, 0, 0), vals=None, dims=None, out=None,
          name="volume", ranges=None, vname="values"):
    """Mesh of the point box ``lo..hi`` (inclusive) of `vol` for each level, in order.

    Gradients use the samples ``ext[:3]..ext[3:]`` (default: all); `offset` is the
    global index of ``vol[0, 0, 0]``.

    Returns (verts, faces, normals, vout or None, keys or None); keys (global grid edge
    of each vertex in a grid of `dims` samples, distinct per level) only when `dims` is
    given. `out`: C-contiguous buffers on vol's backend, large enough (see _check_out),
    written in place.
    """
    gpu = arrays.is_device_array(vol)
    xp = arrays.get_array_module(vol)
    tables = _device_tables(vol.device.id if gpu else None)
    chunk, ntiles, nunits, nspans = _box_sizes(tuple(lo), tuple(hi))
    if gpu and vals is not None and vals.dtype not in (xp.float32, xp.float64):
        vals = vals.astype(xp.float64)  # the CUDA kernel samples float32 and float64 as they are
    ext = tuple(ext) if ext is not None else (0, 0, 0, *(n - 1 for n in vol.shape))
    if gpu:  # per tile its vertices, triangles and lead column's vertices (see _gpu.count)
        sc = _gpu.Scratch.get(len(levels), ntiles, nunits, nspans, ranges is not None)
        counts, bad = sc.tiles, sc.bad
    else:  # the same, see _cpu.count
        lo_a, hi_a = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        ext = np.asarray(ext, np.int64)
        counts = _cpu.scratch.take((3, len(levels), ntiles), np.int32)  # kept scratch, see _cpu.ScratchPool
        bad = 0
    for n, lev in enumerate(levels):
        if gpu:
            tiles, units, planes = sc.level[n]
            if ranges is not None:
                _gpu.select(ranges, lev, lo, hi, chunk, sc.active, units)
            _gpu.count(vol, ext, lev, lo, hi, chunk, tables, *tiles, bad, units, planes, ranges is not None)
        else:
            bad += _jit.call(_cpu.count, vol, lev, lo_a, hi_a, chunk, tables[0], counts[0, n], counts[1, n],
                             counts[2, n], inputs=(0,))
    geo = np.array([*spacing, *origin], np.float64)
    kdims = np.asarray(dims if dims is not None else (1, 1, 1), np.int64)
    per_level = 3 * int(kdims.prod())

    def alloc(nv: int, nf: int) -> list:
        """The mesh arrays (verts, faces, normals, vals or None, keys or None) for nv, nf."""
        specs = [(np.float32, (nv, 3)), (np.int32, (nf, 3)), (np.float32, (nv, 3)), (np.float32, (nv,))]
        if out is not None:
            _check_out(specs, out)
            mesh = [b[:shape[0]] for (_, shape), b in zip(specs, out)]
            return mesh + [None] * (4 - len(mesh)) + [xp.empty(nv, xp.int64) if dims is not None else None]
        # one allocation: the host's allocator maps, the device's pool looks up, once
        want = specs[:3 + (vals is not None)]
        arrs = (_gpu.mesh_arrays if gpu else _cpu.mesh_arrays)(want + [(np.int64, (nv,))] * (dims is not None))
        return arrs[:len(want)] + [None] * (4 - len(want)) + [arrs[-1] if dims is not None else None]

    if gpu:
        # Second level of the scan: the tiles, all levels in one numbering (_gpu.scan; the
        # exact totals guard it). The flag, the totals and the levels' ends in one read,
        # issued before pass 2: the host waits for it, not for pass 2, and its work after
        # the read overlaps pass 2.
        scan = _gpu.scan(counts)
        totals = bad if len(levels) == 1 else xp.concatenate([bad.astype(xp.int64),
                                                              scan[ntiles - 1:len(levels) * ntiles - 1:ntiles]
                                                              .astype(xp.int64)])
        totals = arrays.scalars_to_host_async(totals)

        def generate(mesh, room, vend=None):
            vedge = sc.edges(room[0])
            for n, lev in enumerate(levels):
                known = None if vend is None else vend[n] - (vend[n - 1] if n else 0)
                tiles, units, planes = sc.level[n]
                _gpu.generate(vol, ext, lev, lo, hi, chunk, tiles, scan, n, ntiles, room, known, tables,
                              geo, offset, vals, mesh[4], kdims, n * per_level, *mesh[:4], vedge, units,
                              planes, ranges is not None)

        room = sc.room if out is None else None
        if room is not None:
            # Pass 2 goes out before the counts come back, into room sized by the last
            # call on this geometry: the GPU runs on from pass 1 instead of waiting for
            # the host to read the counts and allocate (the kernels write nothing beyond
            # the room; a mesh that outgrows it is made again below).
            mesh = alloc(*room)
            generate(mesh, room)
        nbad, nv, nf, *vend = totals.result()
        if nbad:
            raise ValueError(f"{name}: contains NaN or inf")
        _check_size(name, nv, nf)
        vend.append(nv)  # the last level ends at the total
        sc.room = (_room(nv), _room(nf))
        if room is None or nv > room[0] or nf > room[1]:
            mesh = alloc(nv, nf)
            generate(mesh, (nv, nf), vend)
        else:
            mesh = _trim(mesh, nv, nf, room)
        sc.done()
    else:
        if bad:
            raise ValueError(f"{name}: contains NaN or inf")
        flat = counts[:2].reshape(2, -1)
        vincl, tincl = np.cumsum(flat[0], dtype=np.int64), np.cumsum(flat[1], dtype=np.int64)
        *vend, nf = [int(x) for x in np.concatenate([vincl[ntiles - 1::ntiles], tincl[-1:]])]
        nv = vend[-1]
        vbase, tbase = vincl - flat[0], tincl - flat[1]
        _check_size(name, nv, nf)
        mesh = alloc(nv, nf)
        for n, lev in enumerate(levels):
            at = slice(n * ntiles, (n + 1) * ntiles)
            # without a second field, the volume stands in for it (unread): the same specialization
            _jit.call(_cpu.generate, vol, ext, lev, lo_a, hi_a, chunk, counts[0, n], counts[1, n], counts[2, n],
                      vbase[at], tbase[at], *tables, geo, np.asarray(offset, np.int64),
                      vals if vals is not None else vol, vals is not None,
                      mesh[4] if dims is not None else np.zeros(1, np.int64), dims is not None,
                      kdims, n * per_level, mesh[0], mesh[1], mesh[2],
                      mesh[3] if vals is not None else np.zeros(1, np.float32), inputs=(0, 16))
        _cpu.scratch.give(counts)
    if vals is not None:
        _check_sampled(mesh[3], vname)
    return tuple(mesh)


@functools.lru_cache(maxsize=256)
def _box_sizes(lo: tuple, hi: tuple) -> tuple[int, int, int, int]:
    """Planes per chunk, tiles, and the GPU passes' units and plane spans of the point box
    ``lo..hi``, worked out once per box (the host's work before pass 1 delays it)."""
    chunk = chunk_planes(hi[0] - lo[0] + 1)
    return chunk, tile_count(lo, hi, chunk), math.prod(_gpu.unit_grid(lo, hi, chunk)), _gpu.span_count(lo, hi, chunk)


def _check_size(name: str, nv: int, nf: int) -> None:
    if max(nv, nf) > _INT32_MAX:
        raise ValueError(f"{name}: the mesh has {nv} vertices and {nf} triangles, more than int32 indices hold")


def _room(n: int) -> int:
    """Room for the next call's n on the same geometry: an eighth more (surfaces of a
    running simulation change little from step to step)."""
    return min(n + n // 8 + 1024, _INT32_MAX)


def _trim(mesh, nv: int, nf: int, room) -> list:
    """The first nv vertices and nf faces of a mesh made in `room`; copied out when they
    fill less than half of it (the views would keep the whole room allocated)."""
    rows = [nv, nf, nv, nv, nv]
    if 2 * nv >= room[0] and 2 * nf >= room[1]:
        return [None if m is None else m[:r] for m, r in zip(mesh, rows)]
    return [None if m is None else m[:r].copy() for m, r in zip(mesh, rows)]


def _weld(parts, want_values: bool, xp=np):
    """One mesh from parts (verts, faces, normals, vals, keys): vertices with equal keys merged."""
    if not parts:
        empty = (xp.zeros((0, 3), xp.float32), xp.zeros((0, 3), xp.int32), xp.zeros((0, 3), xp.float32))
        return empty + ((xp.zeros(0, xp.float32),) if want_values else ())
    keys = xp.concatenate([x[4] for x in parts])
    _, first, inverse = xp.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.ravel().astype(xp.int32)
    offs = np.cumsum([0] + [len(x[4]) for x in parts[:-1]])
    faces = xp.concatenate([inverse[x[1] + int(o)] for x, o in zip(parts, offs)])
    out: tuple = (xp.concatenate([x[0] for x in parts])[first], faces, xp.concatenate([x[2] for x in parts])[first])
    if want_values:
        out += (xp.concatenate([x[3] for x in parts])[first],)
    return out


def _levels(level, vol, name: str = "volume") -> list[float]:
    if level is None and vol is None:
        raise ValueError("level: required for blocks (no single data range to take the middle of)")
    if level is None:
        lo, hi = arrays.scalar_to_host(vol.min()), arrays.scalar_to_host(vol.max())
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"{name}: contains NaN or inf")
        return [(lo + hi) / 2]
    levels = np.asarray(level, np.float64).reshape(-1).tolist()
    if not all(math.isfinite(v) for v in levels):
        raise ValueError(f"level: must be finite, got {level}")
    return levels


def marching_cubes(volume, level: float | Sequence[float] | None = None, *,
                   spacing: Sequence[float] = (1.0, 1.0, 1.0), origin: Sequence[float] = (0.0, 0.0, 0.0),
                   values=None, out: Sequence | None = None, region: Sequence[Sequence[int]] | None = None,
                   tile_ranges=None):
    """Isosurface(s) of `volume`.

    Parameters
    ----------
    volume : (X, Y, Z) array
        Real, finite samples on a uniform grid.
    level : float or sequence of floats, optional
        Iso value(s); default the middle of the data range. Levels outside the data
        range contribute nothing (all outside: an empty mesh of the right dtypes).
    spacing, origin : (3,) floats
        World geometry of the grid.
    values : (X, Y, Z) array, optional
        A second field, interpolated at the vertices (to colour by); a NaN or inf at an
        end of a crossed edge raises ValueError (samples the surface does not touch are
        not read).
    out : (verts, faces, normals[, vals]) arrays, optional
        Buffers to write the mesh into (a renderer's vertex and index buffers, say):
        float32 (>= V, 3), int32 (>= F, 3), float32 (>= V, 3)[, float32 (>= V,)]. The
        results are then views of their first V / F rows.
    region : ((i0, j0, k0), (i1, j1, k1)), optional
        Contour only the cells ``[i0, i1) x [j0, j1) x [k0, k1)`` (a domain's real cells);
        the samples one beyond the region (ghosts) still shape the gradient normals,
        so adjacent regions' normals agree. Default: every cell.
    tile_ranges : insitu.ranges.TileRanges or {"span", "values"}, optional
        The volume's per-tile (min, max), from whoever wrote it (a solver's sweep): the
        GPU path then reads only the parts whose ranges straddle a level, so the cost
        follows the surface. Without them every part is read (computing them takes a read
        of the volume, :func:`insitu.ranges.tile_ranges`, which pays off only for sparse
        surfaces or ranges kept across calls). They must be true of `volume`: a tile whose
        range misses a level is not looked at.

    Returns
    -------
    verts : (V, 3) float32
        World positions, one per crossed grid edge and level.
    faces : (F, 3) int32
        Vertex indices per triangle.
    normals : (V, 3) float32
        Unit normals from the field gradient, pointing towards lower values.
    vals : (V,) float32
        Only when `values` is given: that field at the vertices.
    """
    vol = _check_volume(volume)
    ranges = None if tile_ranges is None else as_tile_ranges(tile_ranges, vol.shape, vol)
    vals = None if values is None else _check_values(values, vol.shape, "values")
    levels = _levels(level, vol)
    lo: Sequence[int] = (0, 0, 0)
    hi, ext = [n - 1 for n in vol.shape], None
    if region is not None:
        try:
            lo, hi = [int(v) for v in region[0]], [int(v) for v in region[1]]
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"region: expected ((i0, j0, k0), (i1, j1, k1)), got {region!r}") from None
        if len(lo) != 3 or len(hi) != 3 or any(not 0 <= a < b <= n - 1 for a, b, n in zip(lo, hi, vol.shape)):
            raise ValueError(f"region: cells {region!r} must be a non-empty box inside the "
                             f"{tuple(n - 1 for n in vol.shape)} cells of the volume")
        ext = [max(a - 1, 0) for a in lo] + [min(b + 1, n - 1) for b, n in zip(hi, vol.shape)]
    direct = out is not None and _direct(out, vol, values is not None)
    mesh = _mesh(vol, levels, tuple(lo), hi, spacing=tuple(spacing), origin=tuple(origin), ext=ext, vals=vals,
                 out=out if direct else None, ranges=ranges)
    mesh = mesh[:4] if values is not None else mesh[:3]
    return _write_into(mesh, out) if out is not None and not direct else mesh


_NAMES = ("verts", "faces", "normals", "vals")


def _direct(out, vol, want_values: bool) -> bool:
    """Whether the kernels can write into `out` (same backend as vol, C-contiguous)."""
    if len(out) != 3 + want_values:
        raise ValueError(f"out: expected {3 + want_values} buffers ({', '.join(_NAMES[:3 + want_values])}), "
                         f"got {len(out)}")
    bufs = [arrays.asarray(b, name=f"out {n}") for n, b in zip(_NAMES, out)]
    return all(arrays.is_device_array(b) == arrays.is_device_array(vol) and b.flags.c_contiguous for b in bufs)


def _check_out(specs, out) -> None:
    """Raise unless each buffer holds its (dtype, shape) spec (checked once the sizes are known)."""
    for name, (dtype, shape), buf in zip(_NAMES, specs, out):
        b = arrays.asarray(buf, name=f"out {name}")
        if b.dtype != dtype or b.shape[1:] != shape[1:] or b.shape[0] < shape[0]:
            raise ValueError(f"out {name}: need {np.dtype(dtype)} of shape ({shape[0]}+"
                             f"{''.join(f', {n}' for n in shape[1:])}), got {b.dtype} {tuple(b.shape)}")


def _write_into(mesh, out):
    """Copy `mesh` into caller buffers of another backend or layout (counted transfers)."""
    _check_out([(m.dtype, m.shape) for m in mesh], out)
    res = []
    for name, m, buf in zip(_NAMES, mesh, out):
        b = arrays.asarray(buf, name=f"out {name}")
        if arrays.is_device_array(b) == arrays.is_device_array(m):
            b[:len(m)] = m
        elif arrays.is_device_array(b):
            arrays.to_device(m, out=b[:len(m)])
        else:
            arrays.to_host(m, out=b[:len(m)])
        res.append(b[:len(m)])
    return tuple(res)


def marching_cubes_blocks(domain, blocks: Mapping[int, object], level: float | Sequence[float], *,
                          values: Mapping[int, object] | None = None):
    """Isosurface of a decomposed field, one mesh merged from its blocks.

    Each block contributes the cubes whose lower corner is one of its own samples, so
    no cube is done twice; shared vertices are welded by their global grid edge, so the
    merged mesh equals the single-block mesh. Needs ghost width >= 1 (positions and
    faces) and >= 2 for normals equal to the single-block ones (gradients at the block
    edge). Non-periodic domains only.

    Parameters
    ----------
    domain : insitu.domain.Domain
    blocks : mapping gid -> padded array
        With ghost layers filled (after a halo exchange). Any subset of the blocks (one
        rank's): the mesh is then that part of the surface.
    level : float or sequence of floats
    values : mapping gid -> padded array, optional

    Returns
    -------
    As :func:`marching_cubes`, in world coordinates of the domain.
    """
    if any(domain.periodic):
        raise ValueError("marching_cubes_blocks: periodic domains are not supported")
    if domain.ghost < 1:
        raise ValueError(f"marching_cubes_blocks: needs ghost width >= 1, the domain has {domain.ghost}")
    dims, g = domain.dims, domain.ghost
    parts = []
    levels = _levels(level, None)
    for gid, arr in blocks.items():
        b = domain.block(gid)
        vol = _check_volume(arr, f"block {gid}")
        if vol.shape != b.padded_shape:
            raise ValueError(f"block {gid}: shape {vol.shape}, expected {b.padded_shape}")
        # Gradients use only samples inside the domain, so they are one-sided at its
        # edge exactly as in a single-block run.
        ext = [g if lo == 0 else 0 for lo in b.lo] + [n + 2 * g - 1 - (g if hi == d else 0)
                                                      for hi, d, n in zip(b.hi, dims, b.shape)]
        offset = [lo - g for lo in b.lo]  # global index of arr[0, 0, 0]
        lo = [g] * 3
        hi = [min(b.hi[a], dims[a] - 1) - offset[a] for a in range(3)]  # last point: first of the next block
        vals = None
        if values is not None:
            vals = _check_values(values[gid], b.padded_shape, f"values of block {gid}")
        mesh = _mesh(vol, levels, lo, hi, spacing=domain.spacing, origin=domain.origin, ext=ext, offset=offset,
                     vals=vals, dims=dims, name=f"block {gid}", vname=f"values of block {gid}")
        if len(mesh[1]):
            parts.append(mesh)
    xp = arrays.get_array_module(next(iter(blocks.values()))) if blocks else np
    return _weld(parts, values is not None, xp)


def label_surfaces(labels, ids: Sequence[int] | None = None, *, spacing: Sequence[float] = (1.0, 1.0, 1.0),
                   origin: Sequence[float] = (0.0, 0.0, 0.0)):
    """Boundary surfaces of integer labels (a segmentation), one closed mesh per label.

    Parameters
    ----------
    labels : (X, Y, Z) integer array
    ids : sequence of int, optional
        Labels to extract; default every label except 0 (background).

    Returns
    -------
    verts, faces, normals
        As :func:`marching_cubes`, all labels in one mesh, and
    face_label : (F,) int
        The label each triangle bounds.
    """
    lab = arrays.asarray(labels, name="labels")
    if lab.ndim != 3 or lab.dtype.kind not in "iu":
        raise TypeError(f"labels: expected a 3-D integer array, got {lab.dtype} of shape {tuple(lab.shape)}")
    xp = arrays.get_array_module(lab)
    if ids is None:
        ids = [int(i) for i in arrays.to_host(xp.unique(lab)) if i != 0]
    parts = []
    for i in ids:
        # Pad so labels touching the grid's edge still give closed surfaces.
        ind = xp.pad((lab == int(i)).astype(xp.uint8), 1)
        v, f, n = marching_cubes(ind, 0.5, spacing=spacing, origin=np.asarray(origin) - np.asarray(spacing))
        parts.append((v, f, n, xp.full(len(f), int(i), xp.int64)))
    if not parts:
        return (xp.zeros((0, 3), xp.float32), xp.zeros((0, 3), xp.int32), xp.zeros((0, 3), xp.float32),
                xp.zeros(0, xp.int64))
    offs = np.cumsum([0] + [len(p[0]) for p in parts[:-1]])
    return (xp.concatenate([p[0] for p in parts]), xp.concatenate([p[1] + int(o) for p, o in zip(parts, offs)]),
            xp.concatenate([p[2] for p in parts]), xp.concatenate([p[3] for p in parts]))
