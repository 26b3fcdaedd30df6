"""The simulation's domains as ONE ADIOS2 stream of global arrays: :class:`MeshStream`
writes them, :func:`read_steps` reads them back as Blueprint domains.

Layout (each ADIOS2 step a time step): every field is a global array over the whole
uniform grid the domains tile, in ADIOS2's row-major order ``(nz, ny, nx)`` (x fastest,
as VTK's image arrays): vertex fields of the global node dims, element fields of the
global cell dims. Each domain's real part is one block (start = its offset in the grid,
count = its real nodes or cells; ghosts are not written). A node shared by two domains
belongs to the one below it: along each axis a block writes nodes ``(offset, offset +
cells]``, plus node ``offset`` where it starts the grid, so no value is written twice.
That is Fides' convention: its reader's shared points (``CreateSharedPoints``) take each
block's point selection one node lower where it does not start the grid, so the block's
points span exactly its cells (no gaps between blocks in ParaView).

Beside the fields: ``step`` (int64), ``time`` (float64), ``origin`` and ``spacing`` (3
float64 each, x, y, z) and ``blocks``, ``(n, 7)`` int64 rows ``domain_id, x0, y0, z0, cx,
cy, cz`` (each domain's cell offset and real cells), and, set once, the ``vtk.xml`` (VTX) and ``Fides_*`` attributes of
:mod:`insitu.stream.schema` (ParaView and VisIt open the stream as image data).

The PyPI ADIOS2 wheel is serial (no MPI), so one process writes: every rank's blocks are
gathered to rank 0 through the adaptor's :class:`~adaptors.context.Context` (a collective
every rank calls, with its deadline), and rank 0 writes each block with its selection into
the one BP5 file or SST stream. That costs rank 0 memory and time linear in the job's data;
an MPI build of ADIOS2 would let every rank write its own blocks into the same layout.

The transport of the in-transit path (:mod:`adaptors.intransit`); the adaptor's
``adios2_mesh`` extract writes through it. SST as :mod:`insitu.stream` does it (it has
no authentication): readers open only contact files of the user's own
(:class:`~insitu.stream.ContactFileError` otherwise), contact files name the loopback
interface unless ``$INSITU_SST_INTERFACE`` says otherwise, and a lossless writer waits
for its reader at most ``deadline`` seconds per step and in ``close``
(:class:`~insitu.stream.ReaderTimeoutError`, the reader dropped). Device fields are
sliced and reordered on the device, then staged to the host for ADIOS2 (one counted
transfer per block and field: the host-only ADIOS2 needs it).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from insitu import arrays
from insitu.stream import DEADLINE, FrameWriter, open_contact, sst_parameters
from insitu.stream import LOSSLESS as _LOSSLESS
from insitu.stream.schema import fides_uniform, vtx_image

from .mesh import MeshDomain

__all__ = ["LOSSLESS", "MeshStream", "RESERVED", "app_comm", "mesh_schemas", "read_steps"]

#: In transit nothing may be lost: the writer waits for its reader and for queue room (up to a deadline).
LOSSLESS = {**_LOSSLESS, "QueueLimit": "2"}


def app_comm(world=None):
    """This MPMD application's ranks: ``world`` split by ``MPI_APPNUM`` (all of it for a plain job)."""
    from mpi4py import MPI

    world = world or MPI.COMM_WORLD
    app = world.Get_attr(MPI.APPNUM)
    return world.Split(0 if app is None else int(app), world.Get_rank())


#: Variables of the layout that no field may be named.
RESERVED = ("step", "time", "blocks", "origin", "spacing")


@dataclasses.dataclass
class _Grid:
    """The global grid the domains tile, and each domain's place in it."""

    origin: np.ndarray  # (3,) x, y, z of node 0
    spacing: np.ndarray  # (3,)
    cells: tuple[int, int, int]  # x, y, z
    offsets: list[tuple[int, int, int]]  # per block (all ranks, rank order): cell offset x, y, z
    counts: list[tuple[int, int, int]]  # per block: real cells x, y, z

    def nodes(self, b: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """The first node block `b` writes and how many, along x, y, z: nodes
        ``(offset, offset + cells]``, and node ``offset`` too where it is 0."""
        o, c = self.offsets[b], self.counts[b]
        skip = tuple(int(o[a] > 0) for a in range(3))
        return (tuple(o[a] + skip[a] for a in range(3)),  # type: ignore[return-value]
                tuple(c[a] + 1 - skip[a] for a in range(3)))


def _grid(metas: list) -> _Grid:
    """Place every block (``(domain_id, node_origin, spacing, cells)`` of all ranks) in one grid."""
    if not metas:
        raise ValueError("mesh stream: no domain on any rank")
    spacing = np.asarray(metas[0][2], np.float64)
    for did, _, sp, _ in metas:
        if not np.allclose(sp, spacing, rtol=1e-9, atol=0):
            raise ValueError(f"mesh stream: domain {did} has spacing {list(sp)}, domain {metas[0][0]} "
                             f"{spacing.tolist()}: one global array needs one spacing")
    origin = np.min([m[1] for m in metas], axis=0)
    offsets, counts = [], []
    for did, o, _, c in metas:
        f = (np.asarray(o) - origin) / spacing
        off = np.rint(f)
        if np.any(np.abs(f - off) > 1e-6):
            raise ValueError(f"mesh stream: domain {did} starts at {list(o)}, off the grid of origin "
                             f"{origin.tolist()} and spacing {spacing.tolist()}")
        offsets.append(tuple(int(v) for v in off))
        counts.append(tuple(int(v) for v in c))
    cells = tuple(max(o[a] + c[a] for o, c in zip(offsets, counts)) for a in range(3))
    if sum(int(np.prod(c)) for c in counts) != int(np.prod(cells)):
        raise ValueError(f"mesh stream: the domains' real cells ({sum(int(np.prod(c)) for c in counts)}) do not "
                         f"tile the {'x'.join(map(str, cells))} grid they span (gaps or overlaps)")
    return _Grid(origin, spacing, cells, offsets, counts)  # type: ignore[arg-type]


def _block(values, lo, n) -> np.ndarray:
    """``values[lo:lo+n]`` (``[i, j, k]`` indexing) as a host array in ``(z, y, x)`` C order.

    The slice and the reordering run on the array's own device; only the block crosses
    (counted): the one transfer a host-only ADIOS2 needs.
    """
    xp = arrays.get_array_module(values)
    v = values[tuple(slice(a, a + b) for a, b in zip(lo, n))].transpose(2, 1, 0)
    return np.ascontiguousarray(arrays.to_host(xp.ascontiguousarray(v)))


class MeshStream:
    """Writes the job's domains, step after step, as one ADIOS2 stream of global arrays
    (see the module's docstring for the layout).

    :meth:`write` is collective: every rank calls it with its domains; rank 0 alone
    opens the stream and writes. SST goes through :class:`insitu.stream.FrameWriter`'s
    machinery: the writer runs in a process of its own, its contact file names the
    loopback interface unless told otherwise, and no reader holds the simulation longer
    than `deadline`.

    Parameters
    ----------
    name : str
        The extract's filename: the stream (SST) or BP5 directory.
    engine : {"SST", "BP5"}
    ctx : adaptors.context.Context, optional
        The ranks' collectives; None: one process.
    lossless : bool
        SST: wait for the analysis reader and for queue room, up to `deadline` (in transit
        nothing is dropped while a reader keeps up).
    deadline : float or None
        SST: the most seconds one ``write`` waits for the reader (lossless: to connect, or to
        take a step off the full queue) and ``close`` waits for it to release its steps.
        Past it ``write``/``close`` raise :class:`~insitu.stream.ReaderTimeoutError` (on rank 0)
        naming the stream and the reader, which is dropped; the stream is opened again and
        steps written until a reader connects are dropped (counted in ``dropped``). It must
        exceed the analysis's time per step. None waits without limit. Default
        :data:`insitu.stream.DEADLINE`.
    interface : str, optional
        SST: the network interface written into the contact file
        (:func:`insitu.stream.sst_parameters`; default ``$INSITU_SST_INTERFACE`` or "lo").
    """

    def __init__(self, name: str, engine: str = "SST", *, ctx=None, lossless: bool = True,
                 deadline: float | None = DEADLINE, interface: str | None = None) -> None:
        self.path, self.ctx = name, ctx
        self.rank = 0 if ctx is None else ctx.rank
        lossless_queue = {"QueueLimit": LOSSLESS["QueueLimit"]} if lossless and str(engine).upper() == "SST" else {}
        self._writer = None
        if self.rank == 0:
            self._writer = FrameWriter(self.path, engine, lossless=lossless, parameters=lossless_queue,
                                       deadline=deadline, interface=interface)
        self._steps = 0
        self._grid: tuple | None = None  # what the schemas describe (set at the first step)

    @property
    def steps(self) -> int:
        """Steps written (rank 0; elsewhere: steps this rank took part in)."""
        return self._writer.steps if self._writer is not None else self._steps

    @property
    def dropped(self) -> int:
        """Steps dropped (rank 0): lossless SST after a deadline, until a reader connects
        again; default SST, steps replaced by a newer one while the writer process was busy."""
        return self._writer.dropped if self._writer is not None else 0

    def write(self, domains: list[MeshDomain], fields: list[str] | None, *, step: int, time: float) -> bool:
        """Collective: write every rank's `domains` (`fields` of each; default all) as one step.

        Returns
        -------
        False when rank 0 dropped the step (see `deadline`), else True (on other ranks:
        always True; rank 0 alone knows).

        Raises
        ------
        ValueError
            The domains do not tile one uniform grid (spacings differ, a domain off the
            lattice, gaps or overlaps), a field's dtype differs between domains, or a field
            takes a reserved name.
        KeyError
            A domain lacks one of `fields`.
        insitu.stream.ReaderTimeoutError
            SST (rank 0): the reader held the writer past `deadline` and was dropped.
        """
        mine = []
        for d in domains:
            names = list(fields) if fields else sorted(d.fields)
            missing = [n for n in names if n not in d.fields]
            if missing:
                raise KeyError(f"mesh stream: domain {d.domain_id} has no field {missing[0]!r}; "
                               f"fields: {', '.join(sorted(d.fields))}")
            lo, hi = d.cells
            mine.append((int(d.domain_id), [float(v) for v in d.node_origin], [float(v) for v in d.spacing],
                         [int(b) - int(a) for a, b in zip(lo, hi)],
                         {n: (d.fields[n].association, str(np.dtype(d.fields[n].values.dtype))) for n in names}))
        # Every rank places every block (small), then the blocks go to rank 0 (bulk).
        layout = [mine] if self.ctx is None else self.ctx.allgather(mine, what="mesh stream (layout)")
        metas = [m for part in layout for m in part]
        grid = _grid([m[:4] for m in metas])
        kinds: dict[str, tuple] = {}
        for did, _, _, _, fs in metas:
            if set(fs) != set(metas[0][4]):
                raise ValueError(f"mesh stream: domain {did} has fields {sorted(fs)}, domain {metas[0][0]} "
                                 f"{sorted(metas[0][4])}: every domain must write the same fields (name them)")
            for n, kind in fs.items():
                if n in RESERVED:
                    raise ValueError(f"mesh stream: field {n!r} (domain {did}) takes a reserved name "
                                     f"({', '.join(RESERVED)})")
                if kinds.setdefault(n, kind) != kind:
                    raise ValueError(f"mesh stream: field {n!r} is {kind[0]} {kind[1]} in domain {did}, "
                                     f"{kinds[n][0]} {kinds[n][1]} elsewhere: one global array needs one")
        first = sum(len(p) for p in layout[:self.rank])
        blocks = []
        for i, d in enumerate(domains):
            b = first + i
            start, n = grid.nodes(b)
            lo = [d.cells[0][a] + start[a] - grid.offsets[b][a] for a in range(3)]
            out = {}
            for name in metas[b][4]:
                f = d.fields[name]
                if f.association == "vertex":
                    out[name] = _block(f.values, lo, n)
                else:
                    out[name] = _block(f.values, d.cells[0], grid.counts[b])
            blocks.append((b, out))
        parts = [blocks] if self.ctx is None else self.ctx.gather(blocks, what="mesh stream (blocks)")
        self._steps += 1
        if self._writer is None:
            return True
        assert parts is not None  # rank 0
        return self._put(grid, metas, kinds, [blk for part in parts for blk in part], step, time)

    def _put(self, grid: _Grid, metas: list, kinds: dict, blocks: list, step: int, time: float) -> bool:
        cx, cy, cz = grid.cells
        table = np.array([[m[0], *grid.offsets[b], *grid.counts[b]] for b, m in enumerate(metas)], np.int64)
        out: list = [("step", np.array([step], np.int64)), ("time", np.array([time], np.float64)), ("blocks", table),
                     ("origin", grid.origin.astype(np.float64)), ("spacing", grid.spacing.astype(np.float64))]
        for b, data in blocks:
            for name, a in data.items():
                vertex = kinds[name][0] == "vertex"
                o = grid.nodes(b)[0] if vertex else grid.offsets[b]
                shape = [cz + 1, cy + 1, cx + 1] if vertex else [cz, cy, cx]
                out.append((name, a, shape, [o[2], o[1], o[0]], list(a.shape)))
        assert self._writer is not None  # rank 0
        attrs = {}
        now = (grid.origin.tolist(), grid.spacing.tolist(), grid.cells, sorted(kinds.items()))
        if self._grid is None:
            self._grid = now
            attrs = mesh_schemas(grid.cells, grid.origin, grid.spacing, kinds)
        elif now != self._grid:  # the schemas are attributes, written once
            raise ValueError(f"mesh stream {self.path}: the grid or its fields changed since the first step "
                             f"(origin, spacing, cells, fields {now} vs {self._grid}); open a new stream")
        return self._writer.write_variables(out, attributes=attrs)

    def close(self) -> None:
        """Close the stream (rank 0); SST waits at most `deadline` for the reader to release
        its steps (:class:`~insitu.stream.ReaderTimeoutError` past it)."""
        if self._writer is not None:
            self._writer.close()


def mesh_schemas(cells, origin, spacing, kinds: dict) -> dict:
    """The VTX and Fides attributes of a mesh stream: `kinds` is {field: (association, dtype)}.

    Fides needs a point field to size the grid: without one (element fields only) only
    ``vtk.xml`` is written.
    """
    point = [n for n, k in kinds.items() if k[0] == "vertex"]
    cell = [n for n, k in kinds.items() if k[0] != "vertex"]
    attrs: dict = {"vtk.xml": vtx_image(cells, origin, spacing, point=point, cell=cell)}
    if point:
        attrs.update(fides_uniform(origin, spacing, dimension=point[0],
                                   variables={n: "points" if n in point else "cell_set" for n in kinds}))
    return attrs


def _domain(stream, row, cells_zyx: list, origin, spacing, variables: dict, ghost: int) -> dict:
    """Block `row` of the step (``domain_id, x0, y0, z0, cx, cy, cz``) as a Blueprint domain:
    its real cells and up to `ghost` layers of its neighbours' around them (marked in
    ``ascent_ghosts``), read from the global arrays."""
    did, o, c = int(row[0]), [int(v) for v in row[1:4]], [int(v) for v in row[4:7]]
    cells = cells_zyx[::-1]
    lo = [max(0, o[a] - ghost) for a in range(3)]
    hi = [min(cells[a], o[a] + c[a] + ghost) for a in range(3)]
    n = [hi[a] - lo[a] for a in range(3)]
    fields = {}
    for name, info in variables.items():
        if name in RESERVED:
            continue
        vertex = [int(v) for v in info["Shape"].split(",")] == [m + 1 for m in cells_zyx]
        cnt = [m + 1 for m in n] if vertex else n
        a = stream.read(name, [lo[2], lo[1], lo[0]], [cnt[2], cnt[1], cnt[0]])
        # (z, y, x) in C order is Conduit's flat order (i fastest); the [i, j, k] view of it
        fields[name] = {"association": "vertex" if vertex else "element", "topology": "mesh",
                        "values": a.transpose()}
    if n != c:
        g = np.ones(n, np.int32)
        g[tuple(slice(o[a] - lo[a], o[a] - lo[a] + c[a]) for a in range(3))] = 0
        fields["ascent_ghosts"] = {"association": "element", "topology": "mesh", "values": g}
    return {"coordsets": {"coords": {"type": "uniform", "dims": dict(zip("ijk", (v + 1 for v in n))),
                                     "origin": dict(zip("xyz", (float(origin[k] + lo[k] * spacing[k])
                                                                 for k in range(3)))),
                                     "spacing": dict(zip(("dx", "dy", "dz"), map(float, spacing)))}},
            "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
            "fields": fields, "state": {"domain_id": did}}


def read_steps(path: str, *, engine: str = "SST", timeout: float = 60.0, interface: str | None = None,
               part: tuple[int, int] = (0, 1), ghost: int = 1) -> Iterator[tuple[int, float, list]]:
    """Yield ``(step, time, [Blueprint domain, ...])`` from the mesh stream at `path`, step
    by step, until the writer ends it.

    Each domain is a block's real cells, read from the global arrays with its selection,
    and `ghost` layers of cells around them where the grid goes on (the neighbours' real
    values: what a halo exchange gives; marked in the ``ascent_ghosts`` element field), so
    gradients and surfaces at the blocks' seams come out as in situ.

    Parameters
    ----------
    path : str
        The stream (SST) or BP5 directory.
    engine : {"SST", "BP5"}
    timeout : float
        SST: seconds to wait for the contact file and for each step.
    interface : str, optional
        SST: the interface advertised (default ``$INSITU_SST_INTERFACE`` or "lo").
    part : (k, n)
        Read only the blocks ``i`` (in the ``blocks`` table's order) with ``i % n == k``.
    ghost : int
        Layers of ghost cells to add around each block (0: its real cells only).

    Raises
    ------
    insitu.stream.ContactFileError
        SST: the contact file is one someone else could have written; the message names it and its owner.
    """
    import adios2

    if not isinstance(path, str):
        raise TypeError(f"read_steps path: expected the stream's name (one stream for all ranks), got {path!r}")
    k, n = part
    if not (isinstance(n, int) and n > 0 and isinstance(k, int) and 0 <= k < n):
        raise ValueError(f"read_steps part: expected (k, n) with 0 <= k < n, got {part!r}")
    if not (isinstance(ghost, int) and ghost >= 0):
        raise ValueError(f"read_steps ghost: expected an int >= 0, got {ghost!r}")
    ad = adios2.Adios()
    io = ad.declare_io(f"insitu-mesh-reader:{path}")
    io.set_engine(engine)
    if engine == "SST":
        io.set_parameters({"OpenTimeoutSecs": str(max(1, int(timeout))), **sst_parameters(interface)})
        s = open_contact(path, lambda copy: adios2.Stream(io, copy, "r"), timeout=timeout)
    else:
        s = adios2.Stream(io, path, "r")
    try:
        while s.begin_step(timeout=timeout) == adios2.bindings.StepStatus.OK:
            try:
                variables = s.available_variables()
                step, time = int(s.read("step")[0]), float(s.read("time")[0])
                table = s.read("blocks").reshape(-1, 7)
                origin, spacing = s.read("origin"), s.read("spacing")
                cells = [int((table[:, 1 + a] + table[:, 4 + a]).max()) if len(table) else 0 for a in range(3)]
                mesh = [_domain(s, row, cells[::-1], origin, spacing, variables, ghost)
                        for i, row in enumerate(table) if i % n == k]
            finally:
                s.end_step()
            yield step, time, mesh
    finally:
        s.close()
