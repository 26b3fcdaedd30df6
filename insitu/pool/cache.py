"""A block cache addressed by small handles: the worker's in-memory store (cache, persist, LRU).

A worker keeps the blocks it computed under small handles (:class:`Handle`), the way
Spark keeps an RDD's partitions: evictable blocks (``cache``) live in the fast tier
while they fit in ``budget_bytes`` and are spilled least-recently-used first;
persisted blocks (``persist``) are pinned there until ``unpersist``. Nothing is ever
lost: a spilled block comes back, transparently, on the next :meth:`BlockCache.get`.

Tiers, fastest first:

``"resident"``
    The block as it was put: CuPy arrays in GPU memory, NumPy arrays in host memory.
    All resident blocks together stay within ``budget_bytes``.
``"host"``
    Host memory, within ``host_budget_bytes``. A CuPy block is copied into page-locked
    memory (:func:`insitu.arrays.pinned_empty`, one counted device->host transfer)
    and its device copy released. A NumPy block already lives in host memory: it moves
    to this tier *by reference, without a copy*; only its accounting moves from
    ``budget_bytes`` to ``host_budget_bytes``. So a CPU worker models a GPU worker's
    memory hierarchy (its working set is ``budget_bytes``, its overflow
    ``host_budget_bytes``), and CPU runs exercise every tier. A CPU worker that wants
    NumPy blocks to go straight to disk sets ``host_budget_bytes=0``.
``"disk"``
    One HDF5 file per block (one dataset, written with h5py) in this cache's own
    directory under ``spill_dir``, removed by :meth:`BlockCache.close`. The directory
    is named ``insitu-blocks-<host>-<pid>-<random>``: the directories of processes that
    died without closing their cache (SIGKILL) are found by that name and removed by
    :func:`clean_stale_spill_dirs`, which every worker daemon calls at its start. Reloading
    gives back the block's kind (NumPy or CuPy, on the device it came from), dtype and
    shape; a CuPy block goes through a pinned buffer (one counted host->device
    transfer).

Mutation and identity (the Spark-like contract): the cache never copies a block while it
is resident, and :meth:`BlockCache.get` returns the live array, so modifying it in place
modifies the cached value. A block that was spilled and reloaded is a *new* array (for
NumPy blocks, after a trip to disk). Callers must therefore call ``get`` again after
other cache operations instead of holding on to arrays: a held array may have stopped
being the cached value.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import operator
import os
import re
import shutil
import stat
import tempfile
import threading
import weakref
from typing import Any

import numpy as np

from insitu import arrays
from insitu.errors import InsituError

from ._proc import host_tag, pid_alive

__all__ = ["BlockCache", "CacheBudgetError", "CacheStats", "Handle", "clean_stale_spill_dirs"]

TIERS = ("resident", "host", "disk")

# Handle ids are unique across all caches of the process: a handle from another cache is unknown here.
_ids = itertools.count(1)


_SPILL_PREFIX = "insitu-blocks-"
_SPILL_FILE = re.compile(r"block-\d+-\d+\.h5")


def clean_stale_spill_dirs(spill_dir: str | None = None) -> list[str]:
    """Remove the spill directories in `spill_dir` left by dead processes of this node.

    Only directories that are clearly a :class:`BlockCache`'s are touched: named
    ``insitu-blocks-<this host>-<pid>-*``, owned by this user, not symbolic links,
    holding nothing but spilled blocks, and whose process `pid` no longer runs.

    Parameters
    ----------
    spill_dir : str, optional
        Where caches made their directories; default the system's temporary directory.

    Returns
    -------
    list of str
        The directories removed.
    """
    root = spill_dir if spill_dir is not None else tempfile.gettempdir()
    pattern = re.compile(re.escape(f"{_SPILL_PREFIX}{host_tag()}-") + r"(\d+)-[^/]+")
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        m = pattern.fullmatch(name)
        if m is None or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            if not all(_SPILL_FILE.fullmatch(f) for f in os.listdir(path)):
                continue  # something else lives there: not ours to remove
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            removed.append(path)
    return removed


class CacheBudgetError(InsituError, MemoryError):
    """Persisted (pinned) blocks would need more than the cache's budget."""


@dataclasses.dataclass(frozen=True, slots=True)
class Handle:
    """Names one block in a :class:`BlockCache` (picklable, hashable, tiny)."""

    id: int

    def __repr__(self) -> str:
        return f"Handle({self.id})"


@dataclasses.dataclass(frozen=True)
class CacheStats:
    """A snapshot of a :class:`BlockCache`: bytes and entries per tier, and counters.

    ``evictions`` counts resident blocks pushed out to make room; ``spills_to_host``
    and ``spills_to_disk`` count moves into those tiers (host->disk moves included);
    ``reloads`` counts blocks brought back from host or disk (``misses`` are the gets
    that needed one).
    """

    resident_bytes: int
    host_bytes: int
    disk_bytes: int
    persisted_bytes: int
    resident_entries: int
    host_entries: int
    disk_entries: int
    persisted_entries: int
    hits: int
    misses: int
    evictions: int
    spills_to_host: int
    spills_to_disk: int
    reloads: int
    budget_bytes: int | None
    host_budget_bytes: int | None


@dataclasses.dataclass(eq=False)
class _Entry:
    handle: Handle
    device: bool  # a CuPy (device) block
    device_id: int | None
    shape: tuple
    dtype: np.dtype
    nbytes: int
    persisted: bool = False
    tier: str = "resident"
    data: Any = None  # the block, while resident
    host: np.ndarray | None = None  # its host copy (pinned for device blocks), in tier "host"
    path: str | None = None  # its HDF5 file, in tier "disk"
    raw: bool = False  # the file holds the block's raw bytes (a dtype HDF5 cannot store)


def _check_budget(value, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"BlockCache: {name} must be an int number of bytes or None, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"BlockCache: {name} must be an int number of bytes or None, "
                        f"got {type(value).__name__}") from None
    if v < 0:
        raise ValueError(f"BlockCache: {name} must be >= 0 bytes, got {v}")
    return v


class BlockCache:
    """Arrays (NumPy or CuPy) under small handles, within a byte budget; LRU spilling.

    Parameters
    ----------
    budget_bytes : int, optional
        Most bytes of resident blocks (GPU memory for CuPy blocks, host memory for NumPy
        blocks; both count against it). None (default): unlimited, nothing is spilled.
    spill_dir : str, optional
        Where this cache makes its own directory of spilled blocks (created when the
        first block goes to disk, removed by :meth:`close`). Default: the system's
        temporary directory.
    host_budget_bytes : int, optional
        Most bytes of blocks in the host tier; beyond it, least recently used host-tier
        blocks go to disk. None (default): unlimited. 0: spilled blocks go straight to
        disk.

    Notes
    -----
    Blocks are accounted by their ``nbytes`` (a view counts its own size, not its
    base's). A ``put`` stores the reference, never a copy; see the module docstring for
    what that means for in-place changes. An evictable block larger than what
    persisted blocks leave free in the budget is never resident: ``put`` spills it at
    once and each ``get`` returns a fresh reloaded copy (a miss), as Spark's
    ``MEMORY_AND_DISK`` does with a partition that does not fit. All methods are
    thread-safe. Use as a context manager, or call :meth:`close`.

    Examples
    --------
    >>> with BlockCache(budget_bytes=1 << 20) as cache:
    ...     h = cache.put(np.zeros(1000))
    ...     float(cache.get(h).sum())
    0.0
    """

    def __init__(self, budget_bytes: int | None = None, *, spill_dir: str | None = None,
                 host_budget_bytes: int | None = None) -> None:
        self.budget_bytes = _check_budget(budget_bytes, "budget_bytes")
        self.host_budget_bytes = _check_budget(host_budget_bytes, "host_budget_bytes")
        if spill_dir is not None and not isinstance(spill_dir, (str, os.PathLike)):
            raise TypeError(f"BlockCache: spill_dir must be a path or None, got {type(spill_dir).__name__}")
        self._spill_root = os.fspath(spill_dir) if spill_dir is not None else None
        self._dir: str | None = None
        self._dir_finalizer: weakref.finalize | None = None
        self._lock = threading.RLock()
        self._entries: dict[Handle, _Entry] = {}
        # Least recently used first. Persisted blocks are in neither (they are never evicted).
        self._resident_lru: collections.OrderedDict[Handle, _Entry] = collections.OrderedDict()
        self._host_lru: collections.OrderedDict[Handle, _Entry] = collections.OrderedDict()
        self._bytes = dict.fromkeys(TIERS, 0)
        self._persisted_bytes = 0
        self._count = dict.fromkeys(("hits", "misses", "evictions", "spills_to_host", "spills_to_disk", "reloads"), 0)
        self._writes = itertools.count()
        self._closed = False

    # -- public API ---------------------------------------------------------------------

    def put(self, array, *, persist: bool = False) -> Handle:
        """Keep `array` (by reference, no copy) and return its handle.

        Parameters
        ----------
        array : array
            A NumPy or CuPy array (or anything :func:`insitu.arrays.asarray` accepts).
        persist : bool
            Pin it: never evicted until :meth:`unpersist`.

        Raises
        ------
        TypeError
            `array` is not an array, or holds Python objects.
        CacheBudgetError
            ``persist=True`` and the persisted blocks would exceed ``budget_bytes``.
        """
        a = self._check_array(array, "BlockCache.put")
        with self._lock:
            self._check_open()
            e = _Entry(Handle(next(_ids)), arrays.is_device_array(a), arrays.device_id(a), tuple(a.shape),
                       a.dtype, int(a.nbytes), persisted=bool(persist), data=a)
            if e.persisted:
                self._check_pin(e, "put(persist=True)")
            self._store(e)
            self._entries[e.handle] = e
            return e.handle

    def replace(self, handle: Handle, array) -> None:
        """Make `array` (by reference) the value of `handle`; it keeps its persisted flag.

        The old value is released (its spilled copies deleted). Counts as a use.

        Raises
        ------
        KeyError
            Unknown or dropped `handle`.
        CacheBudgetError
            `handle` is persisted and the new value would take the persisted blocks over
            the budget (the old value is kept).
        """
        a = self._check_array(array, "BlockCache.replace")
        with self._lock:
            old = self._entry(handle)
            e = _Entry(old.handle, arrays.is_device_array(a), arrays.device_id(a), tuple(a.shape), a.dtype,
                       int(a.nbytes), persisted=old.persisted, data=a)
            if e.persisted:
                self._check_pin(e, "replace", already=old.nbytes)
            self._detach(old)
            try:
                self._store(e)
            except BaseException:
                self._attach(old)  # the old value stays
                raise
            self._entries[e.handle] = e
            self._free(old)

    def get(self, handle: Handle):
        """The block under `handle`: the live resident array (a hit), or, if it was
        spilled, a reloaded new array (a miss) made resident, evicting least recently
        used blocks as needed (unless it does not fit; see the class notes).

        Raises
        ------
        KeyError
            Unknown or dropped `handle`.
        """
        with self._lock:
            e = self._entry(handle)
            if e.tier == "resident":
                self._count["hits"] += 1
                if not e.persisted:
                    self._resident_lru.move_to_end(e.handle)
                return e.data
            self._count["misses"] += 1
            if not self._fits(e.nbytes):
                if e.tier == "host":
                    self._host_lru.move_to_end(e.handle)
                self._count["reloads"] += 1
                return self._load_copy(e)
            self._bring_back(e)
            return e.data

    def persist(self, handle: Handle) -> None:
        """Pin `handle`'s block: never evicted until :meth:`unpersist`. A spilled block is
        reloaded first. Persisting a persisted block does nothing.

        Raises
        ------
        KeyError
            Unknown or dropped `handle`.
        CacheBudgetError
            The persisted blocks would exceed ``budget_bytes`` (nothing changes).
        """
        with self._lock:
            e = self._entry(handle)
            if e.persisted:
                return
            self._check_pin(e, "persist")
            if e.tier != "resident":
                self._bring_back(e)
            del self._resident_lru[e.handle]  # pinned blocks are not on the LRU list
            e.persisted = True
            self._persisted_bytes += e.nbytes

    def unpersist(self, handle: Handle) -> None:
        """Make `handle`'s block evictable again (the most recently used one). Does
        nothing to a block that is not persisted.

        Raises
        ------
        KeyError
            Unknown or dropped `handle`.
        """
        with self._lock:
            e = self._entry(handle)
            if not e.persisted:
                return
            e.persisted = False
            self._persisted_bytes -= e.nbytes
            self._resident_lru[e.handle] = e

    def drop(self, handle: Handle) -> None:
        """Forget `handle` and free its block (memory, pinned copy or file).

        Raises
        ------
        KeyError
            Unknown or already dropped `handle`.
        """
        with self._lock:
            e = self._entry(handle)
            self._detach(e)
            self._free(e)

    def tier(self, handle: Handle) -> str:
        """Where `handle`'s block is now: ``"resident"``, ``"host"`` or ``"disk"``."""
        with self._lock:
            return self._entry(handle).tier

    def is_persisted(self, handle: Handle) -> bool:
        """Whether `handle`'s block is pinned."""
        with self._lock:
            return self._entry(handle).persisted

    def handles(self) -> list[Handle]:
        """The handles in the cache, oldest first."""
        with self._lock:
            return sorted(self._entries, key=lambda h: h.id)

    def stats(self) -> CacheStats:
        """A snapshot of bytes and entries per tier and of the counters."""
        with self._lock:
            n = collections.Counter(e.tier for e in self._entries.values())
            return CacheStats(
                resident_bytes=self._bytes["resident"], host_bytes=self._bytes["host"],
                disk_bytes=self._bytes["disk"], persisted_bytes=self._persisted_bytes,
                resident_entries=n["resident"], host_entries=n["host"], disk_entries=n["disk"],
                persisted_entries=sum(e.persisted for e in self._entries.values()),
                budget_bytes=self.budget_bytes, host_budget_bytes=self.host_budget_bytes, **self._count)

    @property
    def spill_path(self) -> str | None:
        """This cache's directory of spilled blocks (None until a block went to disk)."""
        return self._dir

    def close(self) -> None:
        """Free every block and remove the spill directory. Further use raises; closing
        twice does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._entries.clear()
            self._resident_lru.clear()
            self._host_lru.clear()
            self._bytes = dict.fromkeys(TIERS, 0)
            self._persisted_bytes = 0
            if self._dir_finalizer is not None:
                self._dir_finalizer()  # rmtree, once

    def __enter__(self) -> "BlockCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __contains__(self, handle: object) -> bool:
        with self._lock:
            return isinstance(handle, Handle) and handle in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        if self._closed:
            return "<BlockCache closed>"
        s = self.stats()
        return (f"<BlockCache {len(self)} blocks: {s.resident_bytes} B resident (budget {s.budget_bytes}), "
                f"{s.host_bytes} B host (budget {s.host_budget_bytes}), {s.disk_bytes} B disk>")

    # -- checks -------------------------------------------------------------------------

    @staticmethod
    def _check_array(array, where: str):
        a = arrays.asarray(array, name=where)  # TypeError for lists, scalars, ...
        if a.dtype.hasobject:
            raise TypeError(f"{where}: arrays of Python objects ({a.dtype}) cannot be cached (nor spilled)")
        return a

    def _check_open(self) -> None:
        if self._closed:
            raise InsituError("BlockCache is closed")

    def _entry(self, handle) -> _Entry:
        self._check_open()
        if not isinstance(handle, Handle):
            raise TypeError(f"BlockCache: expected a Handle (as returned by put), got {type(handle).__name__} "
                            f"{handle!r}")
        try:
            return self._entries[handle]
        except KeyError:
            raise KeyError(f"{handle!r} is not in this BlockCache (never put here, or dropped)") from None

    def _check_pin(self, e: _Entry, what: str, already: int = 0) -> None:
        """Raise if pinning `e` (replacing `already` pinned bytes) exceeds the budget."""
        if self.budget_bytes is None:
            return
        pinned = self._persisted_bytes - already
        if pinned + e.nbytes > self.budget_bytes:
            raise CacheBudgetError(
                f"BlockCache.{what}: pinning {e.handle!r} ({e.nbytes} B) would make {pinned + e.nbytes} B "
                f"persisted, over budget_bytes={self.budget_bytes} ({pinned} B already persisted); "
                "unpersist or drop blocks, or raise the budget")

    def _fits(self, nbytes: int) -> bool:
        """Whether a block of `nbytes` can be resident once every evictable block is out."""
        return self.budget_bytes is None or self._persisted_bytes + nbytes <= self.budget_bytes

    # -- moving blocks between tiers (lock held) ----------------------------------------
    #
    # Every move copies first and changes the bookkeeping only once the copy succeeded, so
    # an exception (out of memory, disk full) leaves each block in one consistent tier.

    def _store(self, e: _Entry) -> None:
        """Account a new entry `e` (holding its data) as resident, evicting others; spill
        `e` itself if it cannot be resident."""
        if not e.persisted and not self._fits(e.nbytes):
            self._spill(e)
            return
        self._make_room(e.nbytes)
        self._bytes["resident"] += e.nbytes
        if e.persisted:
            self._persisted_bytes += e.nbytes
        else:
            self._resident_lru[e.handle] = e

    def _make_room(self, nbytes: int) -> None:
        if self.budget_bytes is None:
            return
        while self._bytes["resident"] + nbytes > self.budget_bytes and self._resident_lru:
            victim = next(iter(self._resident_lru.values()))
            self._spill(victim)
            del self._resident_lru[victim.handle]
            self._bytes["resident"] -= victim.nbytes
            self._count["evictions"] += 1

    def _spill(self, e: _Entry) -> None:
        """Move `e`'s data (resident, or never made resident) to host or disk; the
        caller drops it from the resident accounting."""
        if self.host_budget_bytes is None or e.nbytes <= self.host_budget_bytes:
            self._make_host_room(e.nbytes)
            if e.device:
                host = arrays.to_host(e.data, out=arrays.pinned_empty(e.shape, e.dtype))  # counted d2h
            else:
                host = e.data  # already host memory: moves by reference
            e.host, e.data, e.tier = host, None, "host"
            self._bytes["host"] += e.nbytes
            self._host_lru[e.handle] = e
            self._count["spills_to_host"] += 1
        else:
            self._write_disk(e, arrays.to_host(e.data) if e.device else e.data)
            e.data = None

    def _make_host_room(self, nbytes: int) -> None:
        """Write least recently used host-tier blocks to disk until `nbytes` more fit."""
        if self.host_budget_bytes is None:
            return
        while self._bytes["host"] + nbytes > self.host_budget_bytes and self._host_lru:
            victim = next(iter(self._host_lru.values()))
            self._write_disk(victim, victim.host)
            del self._host_lru[victim.handle]
            self._bytes["host"] -= victim.nbytes
            victim.host = None

    def _spill_dir(self) -> str:
        if self._dir is None:
            root = self._spill_root
            if root is not None:
                os.makedirs(root, exist_ok=True)
            self._dir = tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{host_tag()}-{os.getpid()}-", dir=root)
            self._dir_finalizer = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        return self._dir

    def _write_disk(self, e: _Entry, host: np.ndarray) -> None:
        """Write `host` (e's value) to e's file and account `e` as on disk."""
        import h5py

        # A new name per write: a replaced value's old file may still be on disk.
        path = os.path.join(self._spill_dir(), f"block-{e.handle.id}-{next(self._writes)}.h5")
        a = np.ascontiguousarray(host)
        try:
            with h5py.File(path, "w") as f:
                try:
                    f.create_dataset("block", data=a)
                    raw = False
                except TypeError:  # a dtype HDF5 has no type for (datetime64, ...): its raw bytes
                    f.create_dataset("block", data=a.reshape(-1).view(np.uint8))
                    raw = True
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(path)
            raise
        e.path, e.raw, e.tier = path, raw, "disk"
        self._bytes["disk"] += e.nbytes
        self._count["spills_to_disk"] += 1

    def _read_disk(self, e: _Entry) -> np.ndarray:
        import h5py

        out = arrays.pinned_empty(e.shape, e.dtype) if e.device else np.empty(e.shape, e.dtype)
        with h5py.File(e.path, "r") as f:
            ds = f["block"]
            dst = out.reshape(-1).view(np.uint8) if e.raw else out
            if dst.size and dst.ndim:
                ds.read_direct(dst)
            else:
                dst[...] = ds[()]
        return out

    def _upload(self, e: _Entry, host: np.ndarray):
        """`e`'s value of its own kind: `host` itself, or a new device array (counted h2d)."""
        return arrays.to_device(host, device=e.device_id) if e.device else host

    def _load_copy(self, e: _Entry):
        """A new array of `e`'s kind with its value, from host or disk; `e` stays put."""
        return self._upload(e, e.host if e.tier == "host" else self._read_disk(e))

    def _bring_back(self, e: _Entry) -> None:
        """Reload spilled `e` and make it resident (evictable, most recently used)."""
        if e.tier == "host":
            # Out of the host tier first, so that blocks evicted to make room do not push
            # it to disk on the way; its buffer is held until the upload is done.
            host = e.host
            self._discard_spilled(e)
            try:
                self._make_room(e.nbytes)
                data = self._upload(e, host)
            except BaseException:
                e.host, e.tier = host, "host"
                self._host_lru[e.handle] = e
                self._bytes["host"] += e.nbytes
                raise
        else:
            self._make_room(e.nbytes)
            data = self._load_copy(e)
            self._discard_spilled(e)
        e.data, e.tier = data, "resident"
        self._bytes["resident"] += e.nbytes
        self._resident_lru[e.handle] = e
        self._count["reloads"] += 1

    def _discard_spilled(self, e: _Entry) -> None:
        """Take spilled `e` out of its tier and free its copy there."""
        if e.tier == "host":
            del self._host_lru[e.handle]
            self._bytes["host"] -= e.nbytes
            e.host = None
        elif e.tier == "disk":
            self._bytes["disk"] -= e.nbytes
            path, e.path = e.path, None
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    def _detach(self, e: _Entry) -> None:
        """Take `e` out of the cache's bookkeeping, its storage untouched."""
        del self._entries[e.handle]
        if e.tier == "resident":
            self._bytes["resident"] -= e.nbytes
            if e.persisted:
                self._persisted_bytes -= e.nbytes
            else:
                del self._resident_lru[e.handle]
        elif e.tier == "host":
            del self._host_lru[e.handle]
            self._bytes["host"] -= e.nbytes
        else:
            self._bytes["disk"] -= e.nbytes

    def _attach(self, e: _Entry) -> None:
        """Undo :meth:`_detach` (the tiers may end up over budget; nothing is lost)."""
        self._entries[e.handle] = e
        self._bytes[e.tier] += e.nbytes
        if e.tier == "resident":
            if e.persisted:
                self._persisted_bytes += e.nbytes
            else:
                self._resident_lru[e.handle] = e
        elif e.tier == "host":
            self._host_lru[e.handle] = e

    @staticmethod
    def _free(e: _Entry) -> None:
        """Free a detached entry's storage."""
        e.data = e.host = None
        if e.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(e.path)
            e.path = None
