"""Trigger conditions: small expressions over global field reductions.

    max(field('T')) > 2.0
    cycle % 10 == 0 and avg(field('rho')) < 1e-3
    param('iso') != 0.5

Parsed with Python's :mod:`ast` and evaluated over a whitelist: numbers, ``cycle``,
``time``, arithmetic, comparisons, ``and``/``or``/``not``, the reductions ``min``,
``max``, ``sum``, ``avg`` of ``field('name')`` (over every domain of every rank: each
reduction is collective, and every rank evaluates the same expression in the same
order), and ``param('name')``. Anything else is refused when the configuration is read.
"""

from __future__ import annotations

import ast
import functools
import operator
from typing import Callable

__all__ = ["REDUCTIONS", "evaluate", "parse"]

REDUCTIONS = ("min", "max", "sum", "avg")
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}
_NAMES = ("cycle", "time")


@functools.lru_cache(maxsize=256)
def parse(text: str) -> ast.Expression:
    """Parse and check a condition; raises ValueError naming what is not allowed."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"cannot parse {text!r}: {e.msg} at column {e.offset}") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.BinOp, ast.UnaryOp,
                             ast.Not, ast.USub, ast.UAdd, ast.Load, *_BIN, *_CMP)):
            continue
        if isinstance(node, ast.Constant) and (isinstance(node.value, (int, float, str))
                                               and not isinstance(node.value, bool)):
            continue
        if isinstance(node, ast.Name) and (node.id in _NAMES or node.id in REDUCTIONS
                                           or node.id in ("field", "param")):
            continue
        if isinstance(node, ast.Call):
            fn = node.func.id if isinstance(node.func, ast.Name) else None
            if node.keywords or len(node.args) != 1:
                raise ValueError(f"{text!r}: {fn or 'call'}() takes one argument")
            arg = node.args[0]
            if fn in REDUCTIONS:
                if not (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "field"):
                    raise ValueError(f"{text!r}: {fn}() takes field('name')")
                continue
            if fn in ("field", "param"):
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    raise ValueError(f"{text!r}: {fn}() takes a quoted name")
                continue
            raise ValueError(f"{text!r}: unknown function {fn!r}; known: {', '.join(REDUCTIONS)}, field, param")
        raise ValueError(f"{text!r}: {type(node).__name__} is not allowed in a condition "
                         f"(numbers, {', '.join(_NAMES)}, arithmetic, comparisons, and/or/not, "
                         f"{'/'.join(REDUCTIONS)}(field('name')), param('name'))")
    return tree


def evaluate(text: str, *, cycle: int, time: float, reduce: Callable[[str, str], float],
             param: Callable[[str], float]) -> bool:
    """Evaluate a condition.

    Parameters
    ----------
    reduce : callable
        ``reduce(op, field_name) -> float``: a global reduction (collective).
    param : callable
        ``param(name) -> float``: a user parameter.
    """
    names = {"cycle": cycle, "time": time}

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return names[n.id]
        if isinstance(n, ast.BoolOp):
            vals = (ev(v) for v in n.values)  # lazy, but every rank short-circuits alike
            return all(vals) if isinstance(n.op, ast.And) else any(vals)
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            return (not v) if isinstance(n.op, ast.Not) else (-v if isinstance(n.op, ast.USub) else +v)
        if isinstance(n, ast.BinOp):
            return _BIN[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.Compare):
            left = ev(n.left)
            for op, right in zip(n.ops, n.comparators):
                r = ev(right)
                if not _CMP[type(op)](left, r):
                    return False
                left = r
            return True
        if isinstance(n, ast.Call):
            if n.func.id == "param":
                return param(n.args[0].value)
            return reduce(n.func.id, n.args[0].args[0].value)
        raise AssertionError(ast.dump(n))

    return bool(ev(parse(text)))
