"""Command packages: a lazy list of operations sent to a worker in one round trip.

As in the paper, transformations (send, exec, exec_seq, exec_gl) only record
themselves; an action (recv, cache, persist) makes the caller submit the whole package,
which the worker carries out in order. Operations refer to earlier results by
:class:`Ref`, so intermediate arrays never leave the worker.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["KINDS", "Op", "Package", "Ref"]

#: Operation kinds a worker understands; the last six produce the package's outputs.
KINDS = ("send", "get", "exec", "exec_seq", "exec_gl", "init_gl", "recv", "cache", "persist", "unpersist", "drop")
_OUTPUTS = ("init_gl", "recv", "cache", "persist", "unpersist", "drop")


@dataclasses.dataclass(frozen=True)
class Ref:
    """The result of operation `index` of the package being built."""

    index: int


@dataclasses.dataclass(frozen=True)
class Op:
    kind: str
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)


class Package:
    """Operations for one round trip to a worker."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, kind: str, *args: Any, **kwargs: Any) -> Ref:
        """Append an operation; returns the reference to its result."""
        if kind not in KINDS:
            raise ValueError(f"command package: unknown operation {kind!r}; expected one of {', '.join(KINDS)}")
        for a in args:
            if isinstance(a, Ref) and not 0 <= a.index < len(self.ops):
                raise ValueError(f"command package: {kind} refers to operation {a.index}, which is not before it")
        self.ops.append(Op(kind, args, kwargs))
        return Ref(len(self.ops) - 1)

    @property
    def outputs(self) -> list[int]:
        """Indices of the operations whose results come back."""
        return [i for i, op in enumerate(self.ops) if op.kind in _OUTPUTS]

    def __len__(self) -> int:
        return len(self.ops)
