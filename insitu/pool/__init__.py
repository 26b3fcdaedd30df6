"""GPU workers: a block cache, a kernel cache, command packages and the paper's API.

The embedded engine places one :class:`Worker` in each process (an ``mpirun`` rank);
:class:`GPUBlocks` is the paper's lazily transformed set of GPU blocks
(``send_gpu``, ``exec_gpu``, ``exec_gpu_seq``, ``exec_gl``, then ``recv_gpu``,
``cache_gpu``, ``persist_gpu``, ``unpersist_gpu``); :class:`GPUShuffleManager` moves
blocks between the workers of a job (``gpu_shuffle(blocks, "key" | "halo")``). Workers run
in-process or as a daemon per GPU (:func:`ensure_daemon`, :class:`DaemonWorker`), reached
over a Unix socket with zero-copy hand-off (CUDA IPC, shared memory).
"""

from .api import GPUBlocks
from .cache import BlockCache
from .client import DaemonWorker, WorkerDiedError, WorkerTimeoutError
from .commands import Package, Ref
from .kernels import KernelCache, exec_kernel
from .daemon import DaemonHandle, ensure_daemon, start_daemon
from .shared import shared_empty
from .shuffle import GPUShuffleManager, stable_partition
from .worker import Worker

__all__ = [
    "BlockCache",
    "DaemonHandle",
    "DaemonWorker",
    "GPUBlocks",
    "GPUShuffleManager",
    "KernelCache",
    "Package",
    "Ref",
    "Worker",
    "WorkerDiedError",
    "WorkerTimeoutError",
    "ensure_daemon",
    "exec_kernel",
    "shared_empty",
    "stable_partition",
    "start_daemon",
]
