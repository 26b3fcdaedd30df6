"""A worker: one GPU (or the CPU), its block cache and kernel cache, running command
packages. In-process placement (the embedded engine): a package is a method call, the
arrays are handed over by reference.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from insitu import arrays, plugins

from .cache import BlockCache
from .commands import Op, Package, Ref
from .kernels import KernelCache, exec_kernel

__all__ = ["GL_GROUP", "Worker"]

#: Entry point group whose entry ``context`` makes a worker's OpenGL context current.
GL_GROUP = "insitu.gl"


class Worker:
    """Runs command packages next to its data.

    Parameters
    ----------
    device : int, optional
        CUDA device this worker owns; None: the CPU, or the current CUDA device when
        arrays sent to it are CuPy arrays.
    budget_bytes, host_budget_bytes, spill_dir
        The block cache's limits (see :class:`insitu.pool.cache.BlockCache`).
    kernel_cache : KernelCache, optional
        Shared compile cache; default one per worker on the default directory.
    gl_context : callable, optional
        Makes an OpenGL context current for ``exec_gl`` on the calling thread and returns
        it. Default: the factory an installed package declares as entry point ``context``
        in the group ``insitu.gl`` (see :mod:`insitu.plugins`), imported when first needed.
    """

    def __init__(self, device: int | None = None, *, budget_bytes: int | None = None,
                 host_budget_bytes: int | None = None, spill_dir: str | None = None,
                 kernel_cache: KernelCache | None = None, gl_context: Callable[[], Any] | None = None) -> None:
        self.device = device
        self.cache = BlockCache(budget_bytes, spill_dir=spill_dir, host_budget_bytes=host_budget_bytes)
        self.kernels = kernel_cache or KernelCache()
        self._gl_context = gl_context
        self._gl = None
        self.round_trips = 0
        self._lock = threading.Lock()

    # -- the package runner --------------------------------------------------------------

    def run(self, package: Package) -> list:
        """Carry out `package` (one round trip); returns the results of its output
        operations (recv, cache, persist, unpersist) in order."""
        with self._lock:
            self.round_trips += 1
            if self.device is not None:
                cp = arrays.cupy_or_none()
                with cp.cuda.Device(self.device):
                    return self._run(package)
            return self._run(package)

    def _run(self, package: Package) -> list:
        values: list[Any] = []
        for i, op in enumerate(package.ops):
            try:
                values.append(getattr(self, f"_op_{op.kind}")(op, values))
            except Exception as e:
                e.add_note(f"in worker operation {i} ({op.kind}) of {len(package)}")
                raise
        return [values[i] for i in package.outputs]

    @staticmethod
    def _resolve(x, values):
        if isinstance(x, Ref):
            return values[x.index]
        if isinstance(x, (list, tuple)):
            return type(x)(Worker._resolve(v, values) for v in x)
        return x

    def _op_send(self, op: Op, values):
        return self._take(op.args[0], "send")

    def _take(self, x, name: str):
        # A block may be a container of arrays (a shuffle's group of values, a mesh).
        if isinstance(x, (list, tuple)):
            return type(x)(self._take(v, f"{name}[{i}]") for i, v in enumerate(x))
        if isinstance(x, dict):
            return {k: self._take(v, f"{name}[{k!r}]") for k, v in x.items()}
        if x is None or isinstance(x, (str, bytes, int, float, complex)):
            return x  # keys and labels beside the arrays
        a = arrays.asarray(x, name=name)
        if self.device is not None and not arrays.is_device_array(a):
            a = arrays.to_device(a, device=self.device)  # a GPU worker keeps blocks on its GPU (counted)
        return a

    def _op_get(self, op: Op, values):
        return self.cache.get(op.args[0])

    def _op_exec(self, op: Op, values):
        kernel, name, args = op.args[0], op.args[1], self._resolve(op.args[2], values)
        out = exec_kernel(self.kernels, kernel, name, tuple(args), **op.kwargs)
        return args[0] if out is None else out  # in-place kernels: their first argument is the result

    def _op_exec_seq(self, op: Op, values):
        x = self._resolve(op.args[0], values)
        for kernel, name, extra in op.args[1]:
            out = exec_kernel(self.kernels, kernel, name, (x, *self._resolve(tuple(extra), values)))
            x = x if out is None else out
        return x

    def init_gl(self):
        """Make this worker's OpenGL context current on the calling thread (created on
        first use) and return it; ``exec_gl`` calls it before drawing."""
        if self._gl_context is None:
            try:  # a plug-in: the runtime itself does not draw
                self._gl_context = plugins.load(GL_GROUP, "context")
            except KeyError as e:
                raise RuntimeError(f"exec_gl needs an OpenGL context: pass Worker(gl_context=...), or install a "
                                   f"package that declares one ({e.args[0]})") from None
        # Called every time: a GL context is current per thread, and a daemon serves each
        # client on its own thread (the factory is expected to keep one context per thread).
        self._gl = self._gl_context()
        return self._gl

    def _op_init_gl(self, op: Op, values):
        return repr(self.init_gl())  # a picklable answer for remote callers

    def _op_exec_gl(self, op: Op, values):
        self.init_gl()
        fn, args = op.args[0], self._resolve(op.args[1], values)
        out = fn(*args, **op.kwargs)
        return args[0] if out is None else out

    def _op_recv(self, op: Op, values):
        x = self._resolve(op.args[0], values)
        return _host_tree(x) if op.kwargs.get("host", True) else x

    def _op_cache(self, op: Op, values):
        return self.cache.put(self._resolve(op.args[0], values))

    def _op_persist(self, op: Op, values):
        x = op.args[0]
        if isinstance(x, Ref):
            return self.cache.put(values[x.index], persist=True)
        self.cache.persist(x)  # a handle already cached
        return x

    def _op_unpersist(self, op: Op, values):
        self.cache.unpersist(op.args[0])
        return op.args[0]

    def _op_drop(self, op: Op, values):
        self.cache.drop(op.args[0])
        return op.args[0]

    def close(self) -> None:
        self.cache.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _host_tree(x: Any) -> Any:
    """`x` with every device array in it (nested tuples, lists and dicts too: a mesh is a
    tuple of arrays) copied to the host, through the counted gateway."""
    if arrays.is_device_array(x):
        return arrays.to_host(x)
    if isinstance(x, tuple):
        items = [_host_tree(v) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, list):
        return [_host_tree(v) for v in x]
    if isinstance(x, dict):
        return {k: _host_tree(v) for k, v in x.items()}
    return x
