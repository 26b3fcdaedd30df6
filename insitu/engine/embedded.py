"""The embedded engine: one worker per rank of the simulation's own MPI job.

No scheduler sits between the simulation and its workers: each rank's worker lives in
the rank's process (its GPU is the rank's GPU), blocks are handed over by reference,
and whatever crosses ranks (halos, shuffles, gathers) goes over the transports of
:mod:`insitu.transports` through the rank's :class:`~insitu.pool.GPUShuffleManager`.
A pipeline is a function of the rank's blocks; every rank runs it (SPMD)::

    engine = EmbeddedEngine(MPI.COMM_WORLD)
    blocks = engine.blocks({gid: field for gid in domain.blocks_of(rank)}, domain=domain)
    for _ in range(iterations):
        blocks = engine.gpu_shuffle(blocks, "halo", domain=domain).exec_gpu(sweep).cache_gpu()
    result = engine.gather(blocks)        # {gid: array} at rank 0
"""

from __future__ import annotations

import time
from typing import Any, Callable, Hashable, Mapping

from insitu import arrays
from insitu.pool import GPUBlocks, GPUShuffleManager, Worker
from insitu.transports import wait_requests
from insitu.transports.base import recv_object

__all__ = ["EmbeddedEngine"]

_TAG_GATHER = 7331


class EmbeddedEngine:
    """Workers inside the simulation's processes, one per rank.

    Parameters
    ----------
    comm : mpi4py communicator, optional
        The job's ranks; ``None``: this process alone.
    device : int, None or "auto"
        The worker's CUDA device. ``"auto"`` (default): ``local rank % GPUs`` where CuPy
        finds a GPU (made current), else the CPU. ``None``: the CPU (NumPy blocks).
    budget_bytes, host_budget_bytes, spill_dir
        The worker's block cache limits (see :class:`insitu.pool.BlockCache`).
    transport : str, optional
        Force one transport for shuffles (default: chosen per pair of ranks).
    timeout : float
        Seconds to wait for other ranks in a collective step before
        :class:`~insitu.errors.PeerTimeoutError`.
    worker : Worker, optional
        Use this worker (an in-process one, or a daemon client) instead of making one.
    """

    name = "embedded"

    def __init__(self, comm=None, *, device: int | str | None = "auto", budget_bytes: int | None = None,
                 host_budget_bytes: int | None = None, spill_dir: str | None = None,
                 transport: str | None = None, timeout: float = 60.0, worker=None) -> None:
        if device == "auto":
            device = arrays.select_device(comm)
        elif device is not None and not isinstance(device, int):
            raise ValueError(f"EmbeddedEngine: device must be an int, None or 'auto', got {device!r}")
        self.comm = comm
        self.rank, self.size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
        self.device = device
        self.timeout = float(timeout)
        self._own_worker = worker is None
        self.worker = worker if worker is not None else Worker(
            device, budget_bytes=budget_bytes, host_budget_bytes=host_budget_bytes, spill_dir=spill_dir)
        self.shuffle = GPUShuffleManager(self.worker, comm, transport=transport, timeout=timeout)

    def __repr__(self) -> str:
        where = "CPU" if self.device is None else f"GPU {self.device}"
        return f"<EmbeddedEngine rank {self.rank}/{self.size} on {where}>"

    # -- blocks ------------------------------------------------------------------------------

    def blocks(self, data: Mapping[Hashable, Any], *, domain=None) -> GPUBlocks:
        """This rank's blocks on its worker (handed over when the first action runs).

        Parameters
        ----------
        data : mapping key -> array
            NumPy/CuPy arrays (or anything :func:`insitu.arrays.asarray` takes), by reference.
        domain : Domain, optional
            When given, keys are block ids and must be exactly the blocks this rank owns,
            each a padded array (interior plus ghosts).
        """
        if domain is not None:
            own = list(domain.blocks_of(self.rank))
            if set(data) != set(own):
                got, want = set(data), set(own)
                raise ValueError(f"engine on rank {self.rank}: expected blocks {sorted(want)} of the domain, "
                                 f"got {sorted(got, key=repr)}")
            for g in own:
                shape = tuple(getattr(data[g], "shape", ()))
                want_shape = domain.block(g).padded_shape
                if shape != want_shape:
                    raise ValueError(f"engine on rank {self.rank}: block {g} has shape {shape}, expected "
                                     f"{want_shape} (interior plus ghost width {domain.ghost} on each side)")
        return GPUBlocks.from_arrays(self.worker, data).send_gpu()

    def gpu_shuffle(self, blocks: GPUBlocks, how: str, **kwargs: Any) -> GPUBlocks:
        """:meth:`GPUShuffleManager.gpu_shuffle` across the job's ranks (collective)."""
        return self.shuffle.gpu_shuffle(blocks, how, **kwargs)

    def move(self, blocks: GPUBlocks, plan) -> GPUBlocks:
        """:meth:`GPUShuffleManager.move` across the job's ranks (collective)."""
        return self.shuffle.move(blocks, plan)

    def run(self, pipeline: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``pipeline(self, *args, **kwargs)`` on this rank (every rank calls it).

        Blocks the pipeline returns with operations still pending are carried out
        (``recv_gpu(host=False)``) so that a pipeline's result is computed when ``run``
        returns; errors carry a note naming the rank.
        """
        try:
            out = pipeline(self, *args, **kwargs)
            if isinstance(out, GPUBlocks) and out._steps:
                out = out.recv_gpu(host=False)
            return out
        except Exception as e:
            e.add_note(f"in the pipeline {getattr(pipeline, '__name__', pipeline)!r} on rank {self.rank} "
                       f"of {self.size} (embedded engine)")
            raise

    def gather(self, blocks: GPUBlocks | Mapping, root: int = 0) -> dict | None:
        """All ranks' blocks as host arrays at `root` (``None`` elsewhere); collective.

        Meant for results and tests: it copies to the host (counted) and pickles.
        """
        if isinstance(blocks, GPUBlocks):
            local = blocks.recv_gpu()
        else:
            local = {k: arrays.to_host(v) for k, v in blocks.items()}
        if self.comm is None:
            return dict(local)
        comm = self.shuffle.comm
        deadline = time.monotonic() + self.timeout
        if self.rank != root:
            wait_requests([comm.isend(local, dest=root, tag=_TAG_GATHER)], [root], deadline,
                          f"gather on rank {self.rank}")
            return None
        out = dict(local)
        for r in range(self.size):
            if r != root:
                out.update(recv_object(comm, r, _TAG_GATHER, deadline, f"gather on rank {root}"))
        return out

    def close(self) -> None:
        """Free the shuffle manager's communicator and the worker this engine made."""
        self.shuffle.close()
        if self._own_worker:
            self.worker.close()

    def __enter__(self) -> "EmbeddedEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
