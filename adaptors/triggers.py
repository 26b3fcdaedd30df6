"""Trigger conditions: small expressions over global field reductions.

    max(field('T')) > 2.0
    cycle % 10 == 0 and avg(field('rho')) < 1e-3
    param('iso') != 0.5

Parsed with Python's :mod:`ast` and evaluated over a whitelist: numbers, ``cycle``,
``time``, arithmetic, comparisons, ``and``/``or``/``not``, the reductions ``min``,
``max``, ``sum``, ``avg`` of ``field('name')`` (over every domain of every rank: each
reduction is collective, and every rank evaluates the same expression in the same
order), and ``param('name')``. Anything else is refused when the configuration is read.

Every accepted expression evaluates in bounded time: at most :data:`MAX_LENGTH` characters
nested at most :data:`MAX_DEPTH` deep, numbers within the float range, ``**`` computed in
floating point (``10 ** 10 ** 7`` overflows at once instead of building a ten-million-digit
integer), and the parts made of constants alone computed when the configuration is read, so
such an overflow is a configuration error rather than a failure at every step.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import sys
from typing import Callable

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "REDUCTIONS", "evaluate", "parse"]

#: Longest condition, in characters.
MAX_LENGTH = 1000
#: Deepest nesting of operations in a condition.
MAX_DEPTH = 32

REDUCTIONS = ("min", "max", "sum", "avg")
# Integer powers are the one operation whose cost grows exponentially with the size of the
# expression; math.pow works in floats and raises OverflowError instead.
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Mod: operator.mod, ast.Pow: math.pow}
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}
_NAMES = ("cycle", "time")


@functools.lru_cache(maxsize=256)
def parse(text: str) -> ast.Expression:
    """Parse and check a condition; raises ValueError naming what is not allowed.

    Constant parts are computed here: one that cannot be (``10 ** 10 ** 7``, ``1 / 0``)
    is refused now rather than at every step.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a condition string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"condition of {len(text)} characters; at most {MAX_LENGTH}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"cannot parse {text!r}: {e.msg} at column {e.offset}") from None
    except (RecursionError, MemoryError, ValueError):  # deep nesting, NUL characters
        raise ValueError(f"cannot parse {text!r}: too deeply nested or not text") from None
    _check(tree.body, text, 0)
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.UnaryOp)) and _constant(node):
            try:
                _eval(node, text, {}, None, None)
            except _ArithmeticProblem as e:
                raise ValueError(f"{text!r}: {e}") from None
    return tree


def _check(node: ast.AST, text: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{text!r}: nested more than {MAX_DEPTH} deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if not abs(node.value) <= sys.float_info.max:  # a literal past the float range; NaN cannot be written
            raise ValueError(f"{text!r}: a number beyond the floating-point range")
        return
    if isinstance(node, ast.Name):
        if node.id not in _NAMES:
            raise ValueError(f"{text!r}: unknown name {node.id!r}; known: {', '.join(_NAMES)} "
                             f"(and the calls {'/'.join(REDUCTIONS)}(field('name')), param('name'))")
        return
    if isinstance(node, ast.Call):
        fn = node.func.id if isinstance(node.func, ast.Name) else None
        if fn == "field":
            raise ValueError(f"{text!r}: field('name') stands only inside {'/'.join(REDUCTIONS)}()")
        if fn not in (*REDUCTIONS, "param"):
            raise ValueError(f"{text!r}: unknown function {fn!r}; known: {', '.join(REDUCTIONS)}, field, param")
        if node.keywords or len(node.args) != 1:
            raise ValueError(f"{text!r}: {fn}() takes one argument")
        arg = node.args[0]
        if fn in REDUCTIONS:
            if not (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "field"
                    and not arg.keywords and len(arg.args) == 1):
                raise ValueError(f"{text!r}: {fn}() takes field('name')")
            arg = arg.args[0]
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            raise ValueError(f"{text!r}: {'field' if fn in REDUCTIONS else fn}() takes a quoted name")
        return
    if isinstance(node, ast.BoolOp) and isinstance(node.op, (ast.And, ast.Or)):
        children = node.values
    elif isinstance(node, ast.Compare) and all(type(op) in _CMP for op in node.ops):
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        children = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        children = [node.operand]
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        raise ValueError(f"{text!r}: a string is allowed only as field('name') or param('name')")
    else:
        what = (type(node.op).__name__ if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp)) else
                next(type(op).__name__ for op in node.ops if type(op) not in _CMP) if isinstance(node, ast.Compare)
                else type(node).__name__)
        raise ValueError(f"{text!r}: {what} is not allowed in a condition "
                         f"(numbers, {', '.join(_NAMES)}, arithmetic, comparisons, and/or/not, "
                         f"{'/'.join(REDUCTIONS)}(field('name')), param('name'))")
    for c in children:
        _check(c, text, depth + 1)


class _ArithmeticProblem(ValueError):
    """An operation of a condition failed (not a reduction or a parameter lookup)."""


def _constant(node: ast.AST) -> bool:
    return not any(isinstance(n, (ast.Name, ast.Call)) for n in ast.walk(node))


def _eval(n: ast.AST, text: str, names: dict, reduce, param):
    """The value of a checked node; arithmetic errors become ValueError."""
    if isinstance(n, ast.Constant):
        return n.value
    if isinstance(n, ast.Name):
        return names[n.id]
    if isinstance(n, ast.BoolOp):
        vals = (_eval(v, text, names, reduce, param) for v in n.values)  # lazy, but every rank short-circuits alike
        return all(vals) if isinstance(n.op, ast.And) else any(vals)
    if isinstance(n, ast.UnaryOp):
        v = _eval(n.operand, text, names, reduce, param)
        return (not v) if isinstance(n.op, ast.Not) else (-v if isinstance(n.op, ast.USub) else +v)
    if isinstance(n, ast.BinOp):
        a, b = _eval(n.left, text, names, reduce, param), _eval(n.right, text, names, reduce, param)
        try:
            return _BIN[type(n.op)](a, b)
        except (ArithmeticError, ValueError) as e:  # overflow, division by zero, a negative base's root
            raise _ArithmeticProblem(f"{ast.unparse(n)}: {type(e).__name__}: {e}") from None
    if isinstance(n, ast.Compare):
        left = _eval(n.left, text, names, reduce, param)
        for op, right in zip(n.ops, n.comparators):
            r = _eval(right, text, names, reduce, param)
            if not _CMP[type(op)](left, r):
                return False
            left = r
        return True
    if isinstance(n, ast.Call):
        if n.func.id == "param":
            return param(n.args[0].value)
        return reduce(n.func.id, n.args[0].args[0].value)
    raise AssertionError(ast.dump(n))


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
    tree = parse(text)
    try:
        return bool(_eval(tree.body, text, {"cycle": cycle, "time": time}, reduce, param))
    except _ArithmeticProblem as e:
        raise ValueError(f"condition {text!r}: {e}") from None
