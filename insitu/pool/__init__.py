"""GPU workers: a block cache, a kernel cache, command packages and the paper's API.

The embedded engine places one :class:`Worker` in each process (an ``mpirun`` rank);
:class:`GPUBlocks` is the paper's lazily transformed set of GPU blocks
(``send_gpu``, ``exec_gpu``, ``exec_gpu_seq``, ``exec_gl``, then ``recv_gpu``,
``cache_gpu``, ``persist_gpu``, ``unpersist_gpu``); :class:`GPUShuffleManager` moves
blocks between the workers of a job (``gpu_shuffle(blocks, "key" | "halo")``).
"""

from .api import GPUBlocks
from .cache import BlockCache
from .commands import Package, Ref
from .kernels import KernelCache, exec_kernel
from .shuffle import GPUShuffleManager, stable_partition
from .worker import Worker

__all__ = [
    "BlockCache",
    "GPUBlocks",
    "GPUShuffleManager",
    "KernelCache",
    "Package",
    "Ref",
    "Worker",
    "exec_kernel",
    "stable_partition",
]
