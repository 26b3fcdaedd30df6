"""The paper's API in snake_case, over a worker: a set of blocks transformed lazily.

    blocks = GPUBlocks.from_arrays(worker, {gid: field})
    smoothed = blocks.send_gpu().exec_gpu(SOURCE, "smooth", grid=..., block=...)
    cached = smoothed.cache_gpu()          # action: one round trip, results stay on the worker
    images = cached.exec_gl(draw).recv_gpu()

Transformations (``send_gpu``, ``exec_gpu``, ``exec_gpu_seq``, ``exec_gl``) record
operations; actions (``recv_gpu``, ``cache_gpu``, ``persist_gpu``, ``unpersist_gpu``)
send every block's operations to the worker as one command package.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping, Sequence

from .commands import Package
from .worker import Worker

__all__ = ["GPUBlocks"]


class GPUBlocks:
    """Blocks keyed by any hashable (a block id), each a chain of pending operations.

    Parameters
    ----------
    worker : Worker
    sources : mapping key -> ("array", array) or ("handle", cache handle)
    steps : tuple of (kind, args, kwargs)
        Operations applied to every block, in order (the block is their first argument).
    """

    def __init__(self, worker: Worker, sources: Mapping[Hashable, tuple], steps: tuple = ()) -> None:
        self.worker = worker
        self._sources = dict(sources)
        self._steps = tuple(steps)

    @classmethod
    def from_arrays(cls, worker: Worker, blocks: Mapping[Hashable, Any]) -> "GPUBlocks":
        """Blocks given by arrays on the driver (NumPy or CuPy); nothing is sent yet."""
        return cls(worker, {k: ("array", v) for k, v in blocks.items()})

    def keys(self) -> list:
        return list(self._sources)

    @property
    def pending(self) -> bool:
        """Whether operations are recorded but not carried out yet."""
        return any(step != "send" for step, _, _ in self._steps) or any(k == "array" for k, _ in self._sources.values())

    def handles(self) -> dict:
        """``{key: cache handle}`` of blocks backed by the worker's cache (none pending)."""
        if self._steps or any(k != "handle" for k, _ in self._sources.values()):
            raise ValueError("handles: these blocks have pending operations; call cache_gpu or persist_gpu first")
        return {k: h for k, (_, h) in self._sources.items()}

    def _with(self, kind: str, *args: Any, **kwargs: Any) -> "GPUBlocks":
        return GPUBlocks(self.worker, self._sources, self._steps + ((kind, args, kwargs),))

    # -- transformations (lazy) ------------------------------------------------------------

    def send_gpu(self) -> "GPUBlocks":
        """Hand the blocks to the worker (by reference in-process; to its GPU if it owns one)."""
        return self._with("send")

    def exec_gpu(self, kernel: Any, function_name: str | None = None, *args: Any, **launch: Any) -> "GPUBlocks":
        """Run `kernel` on every block: CUDA source with `function_name`, a Python/Numba
        callable, or a registered name ("contour.marching_cubes", ...). The block is the
        first argument, `args` follow; `launch` takes grid=, block=, options=. A kernel
        that returns nothing changed its block in place."""
        return self._with("exec", kernel, function_name, args, **launch)

    def exec_gpu_seq(self, kernels: Sequence[tuple]) -> "GPUBlocks":
        """Run ``(kernel, function_name, args)`` steps in sequence, each on the last result."""
        return self._with("exec_seq", [(k, n, tuple(a)) for k, n, a in kernels])

    def exec_gl(self, fn: Callable, *args: Any, **kwargs: Any) -> "GPUBlocks":
        """Call ``fn(block, *args)`` with the worker's OpenGL context current (``init_gl``
        happens on first use)."""
        return self._with("exec_gl", fn, args, **kwargs)

    def init_gl(self) -> "GPUBlocks":
        """Create the worker's OpenGL context now (one round trip) rather than at the
        first ``exec_gl``, so a missing EGL shows before any work is sent."""
        pkg = Package()
        pkg.add("init_gl")
        self.worker.run(pkg)
        return self

    def extract_halo(self, domain) -> "GPUBlocks":
        """Each block becomes the slabs its neighbours need: ``{(neighbour, direction from
        the neighbour): slab}`` (blocks keyed by gid, padded with `domain`'s ghosts)."""
        from .halo import extract_halo

        return self._with("exec", extract_halo, None, (domain,), with_key=True)

    def append_halo(self, domain, halos: Mapping[Hashable, Mapping]) -> "GPUBlocks":
        """Write into each block's ghosts the slabs addressed to it in `halos` (what
        :meth:`extract_halo` produced, for all blocks, after the shuffle)."""
        from .halo import append_halo

        inbox: dict = {k: {} for k in self._sources}
        for slabs in halos.values():
            for (target, direction), slab in slabs.items():
                if target in inbox:
                    inbox[target][direction] = slab
        return self._with("exec_keyed", append_halo, None, (domain,), inbox)

    # -- actions ---------------------------------------------------------------------------

    def _package(self, final: str | None, **final_kw: Any) -> tuple[Package, list]:
        pkg = Package()
        for key, (kind, src) in self._sources.items():
            ref = pkg.add("send", src) if kind == "array" else pkg.add("get", src)
            for step, args, kwargs in self._steps:
                if step == "send":
                    continue  # the source op already put the block on the worker
                if step == "exec":
                    kw = dict(kwargs)
                    front = (ref, key) if kw.pop("with_key", False) else (ref,)
                    ref = pkg.add("exec", args[0], args[1], (*front, *args[2]), **kw)
                elif step == "exec_keyed":  # per-block extra argument (append_halo's inbox)
                    ref = pkg.add("exec", args[0], args[1], (ref, key, *args[2], args[3][key]))
                elif step == "exec_seq":
                    ref = pkg.add("exec_seq", ref, args[0])
                elif step == "exec_gl":
                    ref = pkg.add("exec_gl", args[0], (ref, *args[1]), **kwargs)
            if final is not None:
                pkg.add(final, ref, **final_kw)
        return pkg, list(self._sources)

    def recv_gpu(self, *, host: bool = True) -> dict:
        """Carry out the pending operations and return the blocks (to host memory unless
        ``host=False``)."""
        pkg, keys = self._package("recv", host=host)
        return dict(zip(keys, self.worker.run(pkg)))

    def cache_gpu(self) -> "GPUBlocks":
        """Carry out the pending operations and keep the results in the worker's cache
        (evictable); returns blocks backed by the cached results."""
        pkg, keys = self._package("cache")
        return GPUBlocks(self.worker, {k: ("handle", h) for k, h in zip(keys, self.worker.run(pkg))})

    def persist_gpu(self) -> "GPUBlocks":
        """As :meth:`cache_gpu`, but pinned: never evicted until :meth:`unpersist_gpu`."""
        if not self._steps and all(kind == "handle" for kind, _ in self._sources.values()):
            pkg = Package()
            for _, h in self._sources.values():
                pkg.add("persist", h)
            self.worker.run(pkg)
            return self
        pkg, keys = self._package("persist")
        return GPUBlocks(self.worker, {k: ("handle", h) for k, h in zip(keys, self.worker.run(pkg))})

    def drop_gpu(self) -> None:
        """Free the cached blocks on the worker (one round trip); the handles become invalid."""
        pkg = Package()
        for h in self.handles().values():
            pkg.add("drop", h)
        if len(pkg):
            self.worker.run(pkg)

    def unpersist_gpu(self) -> "GPUBlocks":
        """Make cached blocks evictable again (one round trip)."""
        pkg = Package()
        for kind, src in self._sources.values():
            if kind != "handle":
                raise ValueError("unpersist_gpu: these blocks are not cached (call cache_gpu or persist_gpu first)")
            pkg.add("unpersist", src)
        self.worker.run(pkg)
        return GPUBlocks(self.worker, self._sources)
