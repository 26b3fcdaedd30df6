"""Marching-cubes case tables, derived from the cube's geometry rather than typed in.

Corners ``v0..v7`` sit at offsets (axis0, axis1, axis2) ``(0,0,0) (1,0,0) (1,1,0)
(0,1,0) (0,0,1) (1,0,1) (1,1,1) (0,1,1)``; the 12 edges join them as in Lorensen and
Cline. For each of the 256 inside/outside patterns every cube face gets 0, 1 or 2
segments between its crossed edges; an ambiguous face (two diagonal corners inside)
always separates its inside corners. The rule depends on the face's four corners only,
so two cubes sharing a face cut it the same way and meshes stay watertight. Segments
are oriented (faces walked counter-clockwise seen from outside) and chained into closed
loops, each loop a fan of ``k - 2`` triangles: the same count as Lorensen's table
wherever no face is ambiguous.
"""

from __future__ import annotations

import functools

import numpy as np

CORNERS = np.array([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0),
                    (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)], np.int64)
EDGES = np.array([(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4),
                  (0, 4), (1, 5), (2, 6), (3, 7)], np.int64)


def _faces() -> list[tuple[int, int, int, int]]:
    """The six faces as corner cycles, counter-clockwise seen from outside the cube."""
    faces = []
    for axis in range(3):
        for side in (0, 1):
            cs = [c for c in range(8) if CORNERS[c, axis] == side]
            centre = CORNERS[cs].mean(0)
            normal = np.zeros(3)
            normal[axis] = 1 if side else -1
            u, v = [a for a in range(3) if a != axis]
            ang = [np.arctan2(CORNERS[c, v] - centre[v], CORNERS[c, u] - centre[u]) for c in cs]
            ring = [c for _, c in sorted(zip(ang, cs))]
            # Orient the ring so its winding normal is the outward normal.
            p = CORNERS[ring].astype(float)
            if np.dot(np.cross(p[1] - p[0], p[2] - p[1]), normal) < 0:
                ring = ring[::-1]
            faces.append(tuple(ring))
    return faces


def _edge_of(a: int, b: int) -> int:
    for e, (p, q) in enumerate(EDGES):
        if {p, q} == {a, b}:
            return e
    raise KeyError((a, b))


@functools.cache
def triangle_table() -> tuple[np.ndarray, np.ndarray]:
    """``(counts, tris)``: triangles per case (256,) and their edges (256, 5, 3)."""
    faces = _faces()
    counts = np.zeros(256, np.int64)
    tris = np.full((256, 5, 3), -1, np.int64)
    for case in range(256):
        inside = [(case >> c) & 1 for c in range(8)]
        nxt = {}  # oriented segments: start edge -> end edge
        for ring in faces:
            exits, entries = [], []  # crossings along the ring walk
            for n in range(4):
                a, b = ring[n], ring[(n + 1) % 4]
                if inside[a] and not inside[b]:
                    exits.append((n, _edge_of(a, b)))
                elif inside[b] and not inside[a]:
                    entries.append((n, _edge_of(a, b)))
            # Cut each inside run off: from its exit back to the entry that began it,
            # the nearest entry before it along the ring.
            for n, e_exit in exits:
                _, e_entry = min(entries, key=lambda x: (n - x[0]) % 4)
                nxt[e_exit] = e_entry
        loops, seen = [], set()
        for start in nxt:
            if start in seen:
                continue
            loop, e = [], start
            while e not in seen:
                seen.add(e)
                loop.append(e)
                e = nxt[e]
            loops.append(loop)
        t = 0
        for loop in loops:
            for i in range(1, len(loop) - 1):
                tris[case, t] = (loop[0], loop[i], loop[i + 1])
                t += 1
        counts[case] = t
    return counts, tris


# Kernel form of the tables, shared by the Numba and CUDA paths.
EDGE_AXIS = np.array([int(np.nonzero(CORNERS[b] - CORNERS[a])[0][0]) for a, b in EDGES], np.int64)
EDGE_BASE = np.array([np.minimum(CORNERS[a], CORNERS[b]) for a, b in EDGES], np.int64)


@functools.cache
def kernel_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ntri, tri, edge)`` as int8: triangles per case (256,), their cube edges
    (256, 15), and per cube edge its lower corner's offset and its axis (12, 4)."""
    counts, tris = triangle_table()
    edge = np.concatenate([EDGE_BASE, EDGE_AXIS[:, None]], axis=1)
    return counts.astype(np.int8), tris.reshape(256, 15).astype(np.int8), edge.astype(np.int8)


def chunk_planes(npoints: int) -> int:
    """Planes per segment along axis 0: at most 16 segments per row, at least 16 planes.

    Both backends split rows the same way, so they number vertices and faces alike.
    """
    return max(16, -(-npoints // 16))
