"""Kernel parameters laid out once for both backends.

A layout is groups of named scalars or short vectors, one C type per group. The Numba
kernels read each group from one host vector (float64 for floating groups, int64 for
integer ones) at fixed offsets; the CUDA kernels get all of them as one C struct passed
by value (a kernel argument, not a copy through the transfer gateway), declared from the
same list and filled from a NumPy record of the same bytes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["Layout"]

_NUMPY = {"double": "f8", "float": "f4", "int": "i4"}


class Layout:
    """`groups`: ``(C type, ((name, length), ...))`` in struct order; `struct`: the C name."""

    def __init__(self, struct: str, groups: Sequence[tuple[str, Sequence[tuple[str, int]]]]) -> None:
        self.struct = struct
        self.groups = [(ctype, tuple(fields)) for ctype, fields in groups]
        self.offsets: list[dict[str, int]] = []
        for _, fields in self.groups:
            off, n = {}, 0
            for name, length in fields:
                off[name] = n
                n += length
            self.offsets.append(off)
        self.sizes = [sum(n for _, n in fields) for _, fields in self.groups]
        code = lambda c, n: _NUMPY[c] if n == 1 else f"{n}{_NUMPY[c]}"  # noqa: E731
        self.dtype = np.dtype([(name, code(c, n)) for c, fields in self.groups for name, n in fields], align=True)

    def vectors(self, values: dict) -> list[np.ndarray]:
        """One host vector per group (float64 or int64), `values` by name."""
        out = []
        for (ctype, fields), off, size in zip(self.groups, self.offsets, self.sizes):
            v = np.empty(size, np.int64 if ctype == "int" else np.float64)
            for name, n in fields:
                v[off[name]:off[name] + n] = values[name]
            out.append(v)
        return out

    def record(self, values: dict) -> np.void:
        """`values` as one struct (:meth:`cuda_struct`), to pass by value."""
        rec = np.zeros((), self.dtype)
        for _, fields in self.groups:
            for name, _ in fields:
                rec[name] = values[name]
        return rec[()]

    def cuda_struct(self) -> str:
        """The C declaration of the struct, field for field as :meth:`record` lays it out."""
        lines = [f"    {c} {name}{f'[{n}]' if n > 1 else ''};" for c, fields in self.groups for name, n in fields]
        # The assert catches a layout that drifted from the NumPy record's.
        return (f"struct {self.struct} {{\n" + "\n".join(lines) + "\n};\n"
                f"static_assert(sizeof({self.struct}) == {self.dtype.itemsize}, \"{self.struct} layout\");\n")
