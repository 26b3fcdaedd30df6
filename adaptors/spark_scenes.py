"""Scenes drawn by Spark tasks on the worker daemons (``engine: spark``).

Each render of a step goes like this:

1. On the simulation's ranks, as with the embedded engine: pipelines (their filters are
   cheap or collective: contour and threshold set up what to draw, the eikonal solve
   exchanges halos between ranks), global colour ranges, bounds and the camera.
2. Every rank hands the fields its domains' plots need to its node's worker daemon in
   one command package (CUDA IPC on GPUs, shared memory on the CPU: no host copy of a
   device field), where they are stacked into one cached block per domain.
3. Rank 0, the Spark driver, adopts those blocks (:meth:`SparkEngine.adopt`) and runs
   one Spark job: each task draws its blocks on the daemon that holds them (marching
   cubes and rasterization for pseudocolor plots, ray casting for volume plots, with
   the daemon's OpenGL context) and returns one image per block; then each rank frees
   the blocks it handed over (the job has no side effects: Spark may retry it).
4. The driver composites the block images: surfaces by depth, volumes by "over" in
   visibility order, the volume over the surfaces; the base class adds the background.

Spark's executors must run on the simulation's nodes (``local[N]``, or a cluster whose
workers are there): the blocks live in the daemons of the node that made them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from insitu import arrays

from . import draw as _draw
from .draw import DomainImage, DomainSpec, View, describe_domain, flatten, merge_domains, thread_renderers
from .context import Context
from .pipelines import Dataset
from .scenes import SceneRenderer

__all__ = ["BlockSpec", "SparkSceneRenderer", "draw_block"]


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    """One domain handed to a daemon: the dtypes of its fields stacked in one block (in
    :func:`_stack`'s common dtype), and what to draw of them."""

    dtypes: tuple[np.dtype, ...]
    domain: DomainSpec


def _stack(*fields):
    """One block of a domain's fields (the daemon's copy, on the fields' device)."""
    xp = arrays.get_array_module(fields[0])
    dtype = np.result_type(*(f.dtype for f in fields))
    return xp.stack([f.astype(dtype, copy=False) for f in fields])


def draw_block(block, key, specs: Mapping[Any, BlockSpec], view: View, draw: Callable[..., DomainImage]):
    """Draw one domain in a worker daemon with `draw` (:func:`adaptors.draw.draw_domain`,
    as the driver's process names it); returns the image packed by
    :meth:`DomainImage.packed`: ``(H, W, 9)`` float32.

    Parameters
    ----------
    block : (nfields, nx, ny, nz) array
        The domain's fields stacked (see :func:`_stack`), NumPy or CuPy.
    key : hashable
        The domain's key in `specs`.
    specs : mapping
        :class:`BlockSpec` by domain key.
    view : View
        Camera, image size and the data bounds.
    draw : callable
        The drawing function.
    """
    s = specs[key]
    fields = [block[i].astype(dt, copy=False) for i, dt in enumerate(s.dtypes)]
    image = draw(fields, s.domain, view, renderers=thread_renderers())
    return image.packed(view.width, view.height, like=block)


class SparkSceneRenderer(SceneRenderer):
    """:class:`SceneRenderer` whose drawing runs as Spark tasks on worker daemons.

    Parameters
    ----------
    ctx : Context
        The simulation's ranks; rank 0 runs the Spark driver.
    params : mapping
        ``engine/params`` of the configuration: master, conf, cpu_daemons, timeout,
        npartitions.
    """

    def __init__(self, ctx: Context, params: Mapping[str, Any]) -> None:
        super().__init__(ctx)
        self.params = dict(params)
        self.engine = None
        self._workers: dict = {}
        error, directory = None, None
        if ctx.rank == 0:
            try:
                from insitu.engine.spark import SparkEngine

                self.engine = SparkEngine(self.params["master"], app_name="insitu-adaptor",
                                          conf={k: str(v) for k, v in (self.params.get("conf") or {}).items()},
                                          cpu_daemons=self.params["cpu_daemons"], timeout=self.params["timeout"])
                directory = self.engine.daemon_dir
            except Exception as e:  # noqa: BLE001 - every rank raises it below
                e.add_note("while starting Spark for engine: spark")
                error = e
        ctx.agree(error, "engine: spark")
        self.daemon_dir = ctx.bcast(directory, what="engine: spark (daemon directory)")

    def close(self) -> None:
        """Close the renderers, this rank's daemon connections and (rank 0) Spark, each on
        its own; raises the first failure after all of them were tried."""
        errors = []
        for close in (super().close, *(w.close for w in self._workers.values())):
            try:
                close()
            except Exception as e:  # noqa: BLE001 - raised below, after the rest is closed
                errors.append(e)
        self._workers.clear()
        try:
            self.ctx.barrier(what="engine: spark (closing)")  # no rank still talks to a daemon the driver stops
        except Exception as e:  # noqa: BLE001 - a rank that is gone must not keep Spark running
            errors.append(e)
        if self.engine is not None:
            engine, self.engine = self.engine, None
            try:
                engine.stop()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        if errors:
            raise errors[0]

    def _worker(self, device: int | None):
        """This rank's connection to its node's daemon for `device` (started if none runs)."""
        w = self._workers.get(device)
        if w is None:
            from insitu.pool.daemon import ensure_daemon

            t = float(self.params["timeout"])
            w = self._workers[device] = ensure_daemon(device, directory=self.daemon_dir,
                                                      timeout=max(t, 60.0)).client(timeout=t)
        return w

    def _hand_over(self, plots: list, raw: Dataset) -> tuple[list, dict]:
        """This rank's domains to its daemon: (block records, :class:`BlockSpec` by key)."""
        from insitu.engine.spark import BlockRecord
        from insitu.pool import Package, WorkerDiedError

        per_domain = [describe_domain(plots, i, d) for i, d in enumerate(raw.domains)]
        if not per_domain:
            return [], {}
        devices = {arrays.device_id(f) if arrays.is_device_array(f) else None for fs, _ in per_domain for f in fs}
        if len(devices) != 1:
            raise ValueError(f"engine: spark: this rank's fields are on several devices ({sorted(map(str, devices))})")
        device = devices.pop()
        w = self._worker(device)
        pkg = Package()
        for fields, _ in per_domain:
            pkg.add("cache", pkg.add("exec", _stack, None, tuple(pkg.add("send", f) for f in fields)))
        try:
            handles = w.run(pkg)
        except WorkerDiedError as e:
            from insitu.pool.daemon import pid_alive

            if not str(e).startswith("no worker daemon listens") and pid_alive(w.pid):
                raise
            # The daemon died (since the last step, or under this package): whatever the
            # package did there died with it, so it can run again on a new daemon.
            self._workers.pop(device).close()
            w = self._worker(device)
            handles = w.run(pkg)
        rank = self.ctx.rank
        records, specs = [], {}
        for i, ((fields, spec), h) in enumerate(zip(per_domain, handles)):
            key = (rank, i)
            records.append(BlockRecord(key, h, w.socket_path, device, w.pid))
            specs[key] = BlockSpec(tuple(np.dtype(f.dtype) for f in fields), spec)
        return records, specs

    def _draw(self, where: str, plots: list, cam, w: int, h: int, bounds, raw: Dataset, step: int):
        ctx = self.ctx
        records, specs, error = [], {}, None
        try:
            with self.prof.stage("handover"):
                records, specs = self._hand_over(plots, raw)
        except Exception as e:
            e.add_note(f"in {where} on rank {ctx.rank} (handing the fields to the worker daemon)")
            error = e
        mine = records
        try:
            ctx.agree(error, where)
            if ctx.size > 1:
                gathered = ctx.gather((records, specs), what=f"{where} (block records)")
                if ctx.rank == 0:
                    records = [r for rs, _ in gathered for r in rs]
                    specs = {k: v for _, sp in gathered for k, v in sp.items()}
            result, error = (None, None), None
            if ctx.rank == 0:
                try:
                    with self.prof.stage("spark"):
                        result = self._spark_draw(records, specs, cam, w, h, bounds, where)
                except Exception as e:
                    error = e
            ctx.agree(error, where)
            return result
        finally:
            # Each rank frees what it handed over, after the job: the job itself has no
            # side effects on the daemons, so Spark may retry its tasks freely.
            self._drop(mine)

    def _drop(self, records: list) -> None:
        """Free blocks this rank handed over (after the step, or when it failed)."""
        from insitu.pool import Package

        if not records:
            return
        pkg = Package()
        for r in records:
            pkg.add("drop", r.handle)
        try:
            self._worker(records[0].device).run(pkg)
        except Exception:  # noqa: BLE001 - the step's own error is the one reported
            pass

    def _spark_draw(self, records: list, specs: dict, cam, w: int, h: int, bounds, where: str):
        if not records:
            return np.zeros((h, w, 4), np.float32), None
        n = self.params.get("npartitions") or min(len(records), self.engine.default_parallelism)
        blocks = self.engine.adopt(records, min(n, len(records)))
        view = View(cam, w, h, tuple(map(float, bounds)))
        try:
            # The tasks draw with the function this process names: one drawing code for
            # both engines, wherever it is looked up.
            packed = blocks.exec_gl(draw_block, specs, view, _draw.draw_domain, with_key=True).recv_gpu()
        except Exception as e:
            raise RuntimeError(f"{where}: the Spark job drawing {len(records)} blocks failed: "
                               f"{_python_error(e)}") from e
        keys = sorted(packed)
        images = [DomainImage.unpacked(packed[k], specs[k].domain) for k in keys]
        merged = merge_domains(images, [specs[k].domain.box for k in keys], cam.position)
        return flatten(merged, w, h)


def _python_error(e: BaseException) -> str:
    """The Python exception inside a Py4J error's Java trace (its last line), else `e`."""
    text = str(e)
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line and ("Error:" in line or "Exception:" in line) and not line.startswith(("at ", "org.apache", "py4j")):
            return line
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
