"""Speed models for the eikonal solver, evaluated block by block.

Every model is a function ``(x, y, z) -> speed`` of world coordinates (broadcastable
1-D axes), so a rank computes only its own blocks; :func:`speed_model` builds one from
a name as the command line gives it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["constant", "two_layer", "random_smooth", "from_hdf5", "speed_model", "MODELS"]

SpeedFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def constant(c: float = 1.0) -> SpeedFn:
    """Speed `c` everywhere."""
    if not c > 0:
        raise ValueError(f"speed: constant must be > 0, got {c}")
    return lambda x, y, z: np.full(np.broadcast_shapes(x.shape, y.shape, z.shape), float(c))


def two_layer(slow: float = 1.0, fast: float = 2.0, interface: float = 0.5, axis: int = 0) -> SpeedFn:
    """`slow` below ``coordinate[axis] < interface``, `fast` from there on."""
    if not (slow > 0 and fast > 0):
        raise ValueError(f"speed: two-layer speeds must be > 0, got slow={slow}, fast={fast}")

    def f(x, y, z):
        c = (x, y, z)[axis]
        shape = np.broadcast_shapes(x.shape, y.shape, z.shape)
        return np.broadcast_to(np.where(c < interface, slow, fast), shape).astype(np.float64)

    return f


def random_smooth(seed: int = 0, modes: int = 8, lo: float = 0.5, hi: float = 1.5, scale: float = 3.0) -> SpeedFn:
    """A smooth random field in ``[lo, hi]``: a sum of `modes` random plane waves.

    Analytic in the coordinates, so every rank evaluates its blocks independently and
    the field does not depend on the decomposition.
    """
    rng = np.random.default_rng(seed)
    k = rng.normal(0, scale * 2 * np.pi, (modes, 3))
    ph = rng.uniform(0, 2 * np.pi, modes)
    amp = rng.uniform(0.5, 1.0, modes)
    norm = amp.sum()

    def f(x, y, z):
        # zeros_like: on the coordinates' device when they are CuPy arrays
        s = np.zeros_like(x, dtype=np.float64, shape=np.broadcast_shapes(x.shape, y.shape, z.shape))
        for m in range(modes):
            s += amp[m] * np.cos(k[m, 0] * x + k[m, 1] * y + k[m, 2] * z + ph[m])
        return lo + (hi - lo) * (s / norm + 1) / 2

    return f


def from_hdf5(path: str, dataset: str) -> Callable:
    """Read the speed from an HDF5 dataset (h5py), sliced per block.

    Returns a function of index ranges ``(lo, hi)`` rather than coordinates: the
    dataset is already on the grid.
    """
    import h5py

    with h5py.File(path, "r") as f:
        if dataset not in f:
            raise KeyError(f"speed: {path} has no dataset {dataset!r}; it has {sorted(f.keys())}")
        shape = f[dataset].shape

    def read(lo, hi):
        with h5py.File(path, "r") as f:
            return np.asarray(f[dataset][tuple(slice(a, b) for a, b in zip(lo, hi))], dtype=np.float64)

    read.shape = shape
    return read


MODELS = ("constant", "two-layer", "random-smooth", "hdf5:FILE:DATASET")


def speed_model(spec: str):
    """A speed model from its command-line name (see :data:`MODELS`)."""
    if spec == "constant":
        return constant()
    if spec == "two-layer":
        return two_layer()
    if spec == "random-smooth":
        return random_smooth()
    if spec.startswith("hdf5:"):
        parts = spec.split(":")
        if len(parts) != 3:
            raise ValueError(f"speed: expected hdf5:FILE:DATASET, got {spec!r}")
        return from_hdf5(parts[1], parts[2])
    raise ValueError(f"speed: unknown model {spec!r}; known: {', '.join(MODELS)}")
