"""Which tiles of a padded block sit next to its ghost faces (both backends' active lists)."""

from __future__ import annotations

__all__ = ["face_tiles"]


def face_tiles(shape, faces, span) -> list[tuple[slice, slice, slice]]:
    """Index ranges, in tiles of `span` nodes, of the tiles holding the ghost layer and
    the first interior layer of each face in `faces` (``(axis, -1 or +1)`` pairs) of a
    padded block of `shape`: the tiles a refilled ghost face can change."""
    out = []
    for axis, side in faces:
        n, s = shape[axis], span[axis]
        cut = [slice(None)] * 3
        cut[axis] = slice(0, 1 // s + 1) if side < 0 else slice((n - 2) // s, (n - 1) // s + 1)
        out.append(tuple(cut))
    return out
