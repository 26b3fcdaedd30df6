"""Ascent's expression language, for queries and trigger conditions (the pure core).

Written as Ascent's documentation writes it::

    max(field('pressure')) > 1e300
    cycle() % 100 == 0
    entropy(histogram(field('braid'), num_bins=128))
    max_pressure - history(max_pressure, relative_index = 1) > 100
    if cycle() > 100 then 1 else 0
    magnitude(max(field('e')).position - min(field('e')).position)

and insitu's older form (``cycle % 10 == 0 and avg(field('rho')) < 1e-3``, ``param('iso')``).

What is understood: numbers, booleans, strings (as arguments), arithmetic
(``+ - * / % **``), comparisons, ``and``/``or``/``not``, ``if ... then ... else ...``,
attributes (``.value``, ``.position``, ``.x``), ``array[i]``, assignments before the final
expression (separated by newlines or ``;``), identifiers naming queries (their value this
cycle, or the last one), and the functions of :data:`FUNCTIONS`. Ascent functions that need
derived fields, topologies or binnings (:data:`UNSUPPORTED`) are refused by name when the
configuration is read.

Objects: ``value_position`` (max/min of a field: ``value``, ``position``), ``vector``
(``x, y, z``), ``histogram`` (``value``, ``min_val``, ``max_val``, ``num_bins``, ``clamp``),
``aabb`` (``min``, ``max``) and ``field`` (``x, y, z``: an mcarray's components). A
``value_position`` stands for its value in arithmetic and comparisons.

Differences from Ascent: ``/`` divides integers exactly (Ascent truncates), ``%`` is Python's
(the sign of the divisor), and a division by zero is an error rather than inf; both branches
of an ``if`` are not evaluated, only the one taken (the same on every rank: conditions are
global values). Reductions ignore NaN; ghost cells are left out.

Parsing (:func:`parse`) checks the syntax, the functions and their arguments, and computes
the constant parts, so that a bad expression is a configuration error; :func:`evaluate`
runs one over a :class:`Data` (the field reductions, collective over the job's ranks).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import io
import math
import operator
import sys
import textwrap
import tokenize
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

__all__ = ["AABB", "FUNCTIONS", "MAX_DEPTH", "MAX_LENGTH", "UNSUPPORTED", "Data", "Env", "FieldRef", "Histogram",
           "Program", "ValuePosition", "Vector", "evaluate", "parse", "plain"]

#: Longest expression, in characters.
MAX_LENGTH = 1000
#: Deepest nesting of operations in an expression.
MAX_DEPTH = 32

#: Names every expression knows without a query of that name: ``cycle`` and ``time`` (insitu's
#: older form of ``cycle()``/``time()``) and ``nan``.
BUILTIN_NAMES = ("cycle", "time", "nan")

#: Functions: name -> (argument names, how many are required). Arguments are given by position
#: in this order or by name.
FUNCTIONS: dict[str, tuple[tuple[str, ...], int]] = {
    "cycle": ((), 0), "time": ((), 0),
    "field": (("field_name", "component"), 1),
    "max": (("arg1", "arg2"), 1), "min": (("arg1", "arg2"), 1), "avg": (("arg1",), 1), "sum": (("arg1",), 1),
    "field_nan_count": (("arg1",), 1), "field_inf_count": (("arg1",), 1),
    "vector": (("arg1", "arg2", "arg3"), 3), "magnitude": (("arg1",), 1),
    "abs": (("arg1",), 1), "exp": (("arg1",), 1), "log": (("arg1",), 1), "pow": (("arg1", "arg2"), 2),
    "histogram": (("arg1", "num_bins", "min_val", "max_val"), 1),
    "entropy": (("hist",), 1), "pdf": (("hist",), 1), "cdf": (("hist",), 1),
    "bin": (("hist", "bin", "val"), 1),
    "quantile": (("cdf", "q", "interpolation"), 2),
    "history": (("expr_name", "relative_index", "absolute_index"), 1),
    "bounds": (("topology",), 0),
    "param": (("name",), 1),
}
#: Ascent functions refused by name (derived fields, topologies, binnings, lineouts).
UNSUPPORTED = ("topo", "lineout", "binning", "axis", "paint_binning", "binning_mesh", "point_and_axis",
               "max_from_point", "binning_value", "sin", "cos", "tan", "sqrt", "gradient", "curl", "derived_field",
               "rand", "history_range", "history_gradient", "history_gradient_range", "replace", "recenter",
               "vorticity", "divergence", "qcriterion", "jacobian")

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Mod: operator.mod, ast.Pow: math.pow}  # math.pow: floats, an OverflowError instead of a huge integer
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}


# -- objects ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Vector:
    """Ascent's ``vector``: ``x, y, z``."""

    x: float
    y: float
    z: float

    def plain(self) -> list[float]:
        return [self.x, self.y, self.z]


@dataclasses.dataclass(frozen=True)
class ValuePosition:
    """Ascent's ``value_position`` (``max``/``min`` of a field): the value and the world position
    of the node (vertex fields) or cell centre (element fields) that holds it; where: rank,
    domain id, flat index in the domain's field (i fastest) and association."""

    value: float
    position: Vector
    rank: int = -1
    domain_id: int = -1
    index: int = -1
    assoc: str = ""

    def plain(self) -> dict:
        return {"type": "value_position", "value": self.value, "position": self.position.plain(),
                "element": {"rank": self.rank, "domain_index": self.domain_id, "index": self.index,
                            "assoc": self.assoc}}


@dataclasses.dataclass(frozen=True)
class Histogram:
    """Ascent's ``histogram``: counts (``value``) of ``num_bins`` equal bins over
    ``[min_val, max_val]``, values outside clamped into the end bins."""

    value: np.ndarray
    min_val: float
    max_val: float
    num_bins: int
    clamp: bool = True

    def plain(self) -> dict:
        return {"type": "histogram", "value": [float(v) for v in self.value], "min_val": self.min_val,
                "max_val": self.max_val, "num_bins": self.num_bins, "clamp": self.clamp}


@dataclasses.dataclass(frozen=True)
class AABB:
    """Ascent's ``aabb`` (``bounds()``): ``min`` and ``max`` corners."""

    min: Vector
    max: Vector

    def plain(self) -> dict:
        return {"type": "aabb", "min": self.min.plain(), "max": self.max.plain()}


@dataclasses.dataclass(frozen=True)
class FieldRef:
    """Ascent's ``field``: a mesh field by name (``vel/x`` for a component)."""

    name: str

    def plain(self) -> dict:
        return {"type": "field", "value": self.name}


_ATTRS: dict[type, tuple[str, ...]] = {
    Vector: ("x", "y", "z"), ValuePosition: ("value", "position"), AABB: ("min", "max"),
    Histogram: ("value", "min_val", "max_val", "num_bins", "clamp"), FieldRef: ("x", "y", "z"),
}
_TYPE_NAMES = {Vector: "vector", ValuePosition: "value_position", Histogram: "histogram", AABB: "aabb",
               FieldRef: "field", np.ndarray: "array", str: "string", bool: "bool", int: "int", float: "double"}


def plain(value) -> Any:
    """`value` as plain Python (numbers, lists, dicts): what ``results()['queries']`` holds."""
    if hasattr(value, "plain"):
        return value.plain()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class Data(Protocol):
    """The mesh side of an evaluation: global reductions of this step's fields (each a
    collective: every rank calls the same ones in the same order)."""

    def reduce(self, name: str, op: str) -> float:
        """``sum`` or ``avg`` of field `name`."""

    def extreme(self, name: str, op: str) -> ValuePosition:
        """``max`` or ``min`` of field `name` and where it is."""

    def count(self, name: str, what: str) -> float:
        """How many values of field `name` are ``nan`` or ``inf`` (either sign)."""

    def histogram(self, name: str, num_bins: int, min_val: float | None, max_val: float | None) -> Histogram:
        """Histogram of field `name` (None: the field's global minimum/maximum)."""

    def bounds(self) -> AABB:
        """The world box of the real cells."""


@dataclasses.dataclass
class Env:
    """What an expression sees: the cycle and time, the mesh (`data`), the earlier values of
    queries (`history`: name -> values, oldest first) and user parameters (`param`)."""

    cycle: int
    time: float
    data: Data | None = None
    history: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)
    param: Callable[[str], float] | None = None


# -- parsing ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Program:
    """A parsed expression: assignments, then the expression whose value it has."""

    text: str
    assignments: tuple[tuple[str, ast.expr], ...]
    body: ast.expr
    #: Identifiers it reads that it does not assign (query names), in order of appearance.
    names: tuple[str, ...]


class _Problem(ValueError):
    """An operation of an expression failed (arithmetic, a wrong type, a missing value)."""


@functools.lru_cache(maxsize=512)
def parse(text: str) -> Program:
    """Parse and check an expression; raises ValueError naming what is not allowed.

    Constant parts are computed here: one that cannot be (``10 ** 10 ** 7``, ``1 / 0``) is
    refused now rather than at every step.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected an expression string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"expression of {len(text)} characters; at most {MAX_LENGTH}")
    source = _python_source(text)
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError as e:
        raise ValueError(f"cannot parse {text!r}: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError):  # deep nesting, NUL characters
        raise ValueError(f"cannot parse {text!r}: too deeply nested or not text") from None
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        raise ValueError(f"{text!r}: the last statement must be an expression")
    assignments: list[tuple[str, ast.expr]] = []
    local: set[str] = set()
    names: list[str] = []
    for st in tree.body[:-1]:
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
            raise ValueError(f"{text!r}: only assignments 'name = expression' may come before the expression")
        _check(st.value, text, 0, local, names)
        assignments.append((st.targets[0].id, st.value))
        local.add(st.targets[0].id)
    body = tree.body[-1].value
    _check(body, text, 0, local, names)
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.UnaryOp)) and _constant(node):
            try:
                _Evaluator(text, Env(0, 0.0)).eval(node)
            except _Problem as e:
                raise ValueError(f"{text!r}: {e}") from None
    return Program(text, tuple(assignments), body, tuple(dict.fromkeys(names)))


def _python_source(text: str) -> str:
    """Ascent's syntax as Python's: ``if c then a else b`` -> ``((a) if (c) else (b))``,
    statements one per line."""
    text = textwrap.dedent(text).strip()
    try:
        toks = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                                  tokenize.ENCODING, tokenize.ENDMARKER)]
    except (tokenize.TokenError, SyntaxError) as e:  # an unclosed bracket or string
        raise ValueError(f"cannot parse {text!r}: {e.args[0]}") from None
    for t in toks:
        if t.type == tokenize.ERRORTOKEN and not t.string.isspace():
            raise ValueError(f"cannot parse {text!r}: unexpected {t.string!r} at column {t.start[1] + 1}")
    words = [("\n" if t.type == tokenize.NEWLINE or t.string == ";" else t.string) for t in toks
             if t.type != tokenize.ERRORTOKEN]
    lines, i = [], 0
    while i < len(words):
        part, i = _convert(words, i, (), text)
        if i < len(words) and words[i] not in ("\n",):
            raise ValueError(f"cannot parse {text!r}: unexpected {words[i]!r}")
        if part:
            lines.append(" ".join(part))
        i += 1
    return "\n".join(lines)


_OPEN, _CLOSE = {"(": ")", "[": "]", "{": "}"}, (")", "]", "}")


def _convert(words: list[str], i: int, stops: tuple[str, ...], text: str) -> tuple[list[str], int]:
    """Words from `i` up to a stop word, a closing bracket, a comma or the end of the
    statement (at this nesting level), with every ``if/then/else`` rewritten."""
    out: list[str] = []
    while i < len(words):
        w = words[i]
        if w in stops or w in _CLOSE or w in (",", "\n"):
            break
        if w in _OPEN:
            out.append(w)
            i += 1
            while i < len(words) and words[i] not in _CLOSE:
                part, i = _convert(words, i, (), text)
                out += part
                if i < len(words) and words[i] == ",":
                    out.append(",")
                    i += 1
                elif i < len(words) and words[i] not in _CLOSE:
                    raise ValueError(f"cannot parse {text!r}: unexpected {words[i]!r}")
            if i >= len(words) or words[i] != _OPEN[w]:
                raise ValueError(f"cannot parse {text!r}: unbalanced {w!r}")
            out.append(words[i])
            i += 1
        elif w == "if":
            cond, i = _convert(words, i + 1, ("then",), text)
            if i >= len(words) or words[i] != "then" or not cond:
                raise ValueError(f"cannot parse {text!r}: 'if' needs 'if condition then value else value'")
            then, i = _convert(words, i + 1, ("else",), text)
            if i >= len(words) or words[i] != "else" or not then:
                raise ValueError(f"cannot parse {text!r}: 'if ... then ...' without 'else'")
            other, i = _convert(words, i + 1, stops, text)
            if not other:
                raise ValueError(f"cannot parse {text!r}: nothing after 'else'")
            out += ["((", *then, ") if (", *cond, ") else (", *other, "))"]
        elif w in ("then", "else"):
            raise ValueError(f"cannot parse {text!r}: {w!r} without 'if'")
        else:
            out.append(w)
            i += 1
    return out, i


def _check(node: ast.AST, text: str, depth: int, local: set, names: list) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{text!r}: nested more than {MAX_DEPTH} deep")
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not abs(v) <= sys.float_info.max:  # a literal past the float range; NaN cannot be written
                raise ValueError(f"{text!r}: a number beyond the floating-point range")
            return
        if isinstance(v, bool):
            return
        if isinstance(v, str):
            raise ValueError(f"{text!r}: a string is allowed only as a function's argument, as in field('name')")
        raise ValueError(f"{text!r}: {type(v).__name__} constants are not allowed")
    if isinstance(node, ast.Name):
        if node.id not in local and node.id not in BUILTIN_NAMES:
            names.append(node.id)
        return
    if isinstance(node, ast.Call):
        _check_call(node, text, depth, local, names)
        return
    children: list[ast.AST]
    if isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.Compare) and all(type(op) in _CMP for op in node.ops):
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        children = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        children = [node.operand]
    elif isinstance(node, ast.IfExp):
        children = [node.test, node.body, node.orelse]
    elif isinstance(node, ast.Attribute):
        children = [node.value]
    elif isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
        children = [node.value, node.slice]
    else:
        what = (type(node.op).__name__ if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp)) else
                next(type(op).__name__ for op in node.ops if type(op) not in _CMP) if isinstance(node, ast.Compare)
                else type(node).__name__)
        raise ValueError(f"{text!r}: {what} is not allowed in an expression (numbers, identifiers, arithmetic, "
                         "comparisons, and/or/not, if/then/else, attributes, function calls)")
    for c in children:
        _check(c, text, depth + 1, local, names)


def _check_call(node: ast.Call, text: str, depth: int, local: set, names: list) -> None:
    fn = node.func.id if isinstance(node.func, ast.Name) else None
    if fn is None:
        raise ValueError(f"{text!r}: only named functions can be called (such as max(...)), not "
                         f"{ast.unparse(node.func)!r}")
    if fn in UNSUPPORTED:
        raise ValueError(f"{text!r}: Ascent's {fn}() is not supported here (derived fields, topologies, "
                         f"binnings and lineouts are not); functions: {', '.join(FUNCTIONS)}")
    if fn not in FUNCTIONS:
        raise ValueError(f"{text!r}: unknown function {fn!r}; known: {', '.join(FUNCTIONS)}")
    params, required = FUNCTIONS[fn]
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise ValueError(f"{text!r}: {fn}(): * and ** are not allowed")
    if len(node.args) > len(params):
        raise ValueError(f"{text!r}: {fn}() takes at most {len(params)} argument(s) ({', '.join(params) or 'none'}), "
                         f"got {len(node.args)}")
    given = list(params[:len(node.args)])
    for k in node.keywords:
        if k.arg not in params:
            raise ValueError(f"{text!r}: {fn}() has no argument {k.arg!r}; arguments: {', '.join(params) or 'none'}")
        if k.arg in given:
            raise ValueError(f"{text!r}: {fn}() got argument {k.arg!r} twice")
        given.append(str(k.arg))
    if len(given) < required:
        need = " and ".join(params[:required])
        raise ValueError(f"{text!r}: {fn}() needs {need}")
    args = [*node.args, *(k.value for k in node.keywords)]
    for name, a in zip(given, args):
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            continue  # checked when called (field names are known only then)
        if fn == "history" and name == "expr_name":
            if not isinstance(a, ast.Name):
                raise ValueError(f"{text!r}: history() takes the name of a query, as in history(max_p, "
                                 "relative_index=1)")
            if a.id not in local:
                names.append(a.id)
            continue
        _check(a, text, depth + 1, local, names)


def _constant(node: ast.AST) -> bool:
    return not any(isinstance(n, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) for n in ast.walk(node))


# -- evaluation ---------------------------------------------------------------------------------

def evaluate(text: str, env: Env) -> Any:
    """The value of expression `text` in `env`.

    Raises
    ------
    ValueError
        A wrong type, an arithmetic error, a query without a value yet, a function's bad
        argument: naming the expression.
    MeshError
        A field the mesh does not have (from `env.data`).
    """
    prog = parse(text)
    ev = _Evaluator(text, env)
    try:
        for name, node in prog.assignments:
            ev.local[name] = ev.eval(node)
        return ev.eval(prog.body)
    except _Problem as e:
        raise ValueError(f"expression {text!r}: {e}") from None


def _type(v) -> str:
    return next((n for t, n in _TYPE_NAMES.items() if isinstance(v, t)), type(v).__name__)


def _number(v, what: str) -> float | int | bool:
    """A number (a value_position stands for its value)."""
    if isinstance(v, ValuePosition):
        return v.value
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, FieldRef):
        raise _Problem(f"{what}: field {v.name!r} is not a number; derived fields are not supported here: reduce "
                       f"it first, as in max(field({v.name!r}))")
    raise _Problem(f"{what}: expected a number, got {_type(v)}")


def _int(v, what: str) -> int:
    v = _number(v, what)
    if isinstance(v, bool) or not float(v).is_integer():
        raise _Problem(f"{what}: expected an integer, got {v!r}")
    return int(v)


class _Evaluator:
    def __init__(self, text: str, env: Env) -> None:
        self.text, self.env = text, env
        self.local: dict[str, Any] = {}

    def eval(self, n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return self.name(n.id)
        if isinstance(n, ast.BoolOp):
            # Lazy, and alike on every rank: the operands are global values.
            if isinstance(n.op, ast.And):
                return all(bool(_number(self.eval(v), "and")) for v in n.values)
            return any(bool(_number(self.eval(v), "or")) for v in n.values)
        if isinstance(n, ast.UnaryOp):
            v = self.eval(n.operand)
            if isinstance(n.op, ast.Not):
                return not _number(v, "not")
            if isinstance(v, Vector):
                return Vector(-v.x, -v.y, -v.z) if isinstance(n.op, ast.USub) else v
            v = _number(v, "unary " + ("-" if isinstance(n.op, ast.USub) else "+"))
            return -v if isinstance(n.op, ast.USub) else +v
        if isinstance(n, ast.BinOp):
            return self.binop(n, self.eval(n.left), self.eval(n.right))
        if isinstance(n, ast.Compare):
            left = _number(self.eval(n.left), "comparison")
            for op, right in zip(n.ops, n.comparators):
                r = _number(self.eval(right), "comparison")
                if not _CMP[type(op)](left, r):
                    return False
                left = r
            return True
        if isinstance(n, ast.IfExp):
            return self.eval(n.body) if _number(self.eval(n.test), "if") else self.eval(n.orelse)
        if isinstance(n, ast.Attribute):
            return self.attribute(self.eval(n.value), n.attr)
        if isinstance(n, ast.Subscript):
            arr, i = self.eval(n.value), _int(self.eval(n.slice), "index")
            if not isinstance(arr, np.ndarray):
                raise _Problem(f"[{i}]: expected an array, got {_type(arr)}")
            if not 0 <= i < len(arr):
                raise _Problem(f"array index {i} out of bounds [0, {len(arr) - 1}]")
            return float(arr[i])
        if isinstance(n, ast.Call):
            return self.call(n)
        raise AssertionError(ast.dump(n))

    def name(self, name: str) -> Any:
        if name in self.local:
            return self.local[name]
        if name == "cycle":
            return self.env.cycle
        if name == "time":
            return self.env.time
        if name == "nan":
            return math.nan
        past = self.env.history.get(name)
        if not past:
            known = ", ".join(sorted(self.env.history)) or "none yet"
            raise _Problem(f"unknown identifier {name!r} (no query of that name has a value yet; queries: {known})")
        return past[-1]

    def binop(self, n: ast.BinOp, a, b) -> Any:
        sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Mod: "%", ast.Pow: "**"}[type(n.op)]
        if isinstance(a, Vector) or isinstance(b, Vector):
            if isinstance(a, Vector) and isinstance(b, Vector) and sym in "+-":
                f = _BIN[type(n.op)]
                return Vector(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z))
            raise _Problem(f"{_type(a)} {sym} {_type(b)}: vectors only add to and subtract from vectors")
        x, y = _number(a, sym), _number(b, sym)
        try:
            return _BIN[type(n.op)](x, y)
        except (ArithmeticError, ValueError) as e:  # overflow, division by zero, a negative base's root
            raise _Problem(f"{ast.unparse(n)}: {type(e).__name__}: {e}") from None

    def attribute(self, obj, attr: str) -> Any:
        known = next((a for t, a in _ATTRS.items() if isinstance(obj, t)), ())
        if attr not in known:
            raise _Problem(f"'{attr}' is not an attribute of {_type(obj)}; "
                           + (f"attributes: {', '.join(known)}" if known else "it has none"))
        if isinstance(obj, FieldRef):
            return FieldRef(f"{obj.name}/{attr}")
        return getattr(obj, attr)

    def call(self, n: ast.Call) -> Any:
        fn = n.func.id  # type: ignore[attr-defined]  # checked by parse
        params, _ = FUNCTIONS[fn]
        nodes = dict(zip(params, n.args))
        nodes.update({str(k.arg): k.value for k in n.keywords})
        if fn == "history":
            return self.history(nodes)
        args = {k: self.eval(v) for k, v in nodes.items()}
        return getattr(self, f"fn_{fn}")(args)

    # -- functions (each takes its arguments by name) --

    def data(self, what: str) -> Data:
        if self.env.data is None:
            raise _Problem(f"{what} needs the mesh, which this evaluation does not have")
        return self.env.data

    def fn_cycle(self, a):
        return self.env.cycle

    def fn_time(self, a):
        return self.env.time

    def fn_param(self, a):
        name = a["name"]
        if not isinstance(name, str):
            raise _Problem(f"param(): expected a quoted name, got {_type(name)}")
        if self.env.param is None:
            raise _Problem("param(): no user parameters here")
        return self.env.param(name)

    def fn_field(self, a):
        name = a["field_name"]
        if not isinstance(name, str):
            raise _Problem(f"field(): expected a quoted field name, got {_type(name)}")
        comp = a.get("component")
        if comp is not None and not isinstance(comp, str):
            raise _Problem(f"field(): component must be a quoted name, got {_type(comp)}")
        return FieldRef(name if comp is None else f"{name}/{comp}")

    def _extreme(self, a, op: str):
        x = a["arg1"]
        if "arg2" in a:
            y = a["arg2"]
            if isinstance(x, FieldRef) or isinstance(y, FieldRef):
                raise _Problem(f"{op}(field, ...): derived fields are not supported here")
            u, v = _number(x, op), _number(y, op)
            return (max if op == "max" else min)(u, v)
        if isinstance(x, FieldRef):
            return self.data(f"{op}(field)").extreme(x.name, op)
        if isinstance(x, np.ndarray):
            return float(x.max() if op == "max" else x.min()) if x.size else math.nan
        raise _Problem(f"{op}(): expected a field, an array or two numbers, got {_type(x)}")

    def fn_max(self, a):
        return self._extreme(a, "max")

    def fn_min(self, a):
        return self._extreme(a, "min")

    def _total(self, a, op: str):
        x = a["arg1"]
        if isinstance(x, FieldRef):
            return self.data(f"{op}(field)").reduce(x.name, op)
        if isinstance(x, np.ndarray):
            return float(x.sum() if op == "sum" else (x.mean() if x.size else math.nan))
        raise _Problem(f"{op}(): expected a field or an array, got {_type(x)}")

    def fn_sum(self, a):
        return self._total(a, "sum")

    def fn_avg(self, a):
        return self._total(a, "avg")

    def _count(self, a, what: str):
        x = a["arg1"]
        if not isinstance(x, FieldRef):
            raise _Problem(f"field_{what}_count(): expected a field, got {_type(x)}")
        return self.data(f"field_{what}_count()").count(x.name, what)

    def fn_field_nan_count(self, a):
        return self._count(a, "nan")

    def fn_field_inf_count(self, a):
        return self._count(a, "inf")

    def fn_vector(self, a):
        return Vector(*(float(_number(a[k], "vector()")) for k in ("arg1", "arg2", "arg3")))

    def fn_magnitude(self, a):
        v = a["arg1"]
        if isinstance(v, FieldRef):
            return FieldRef(f"{v.name}/magnitude")  # an mcarray's magnitude, computed by adaptors.mesh
        if not isinstance(v, Vector):
            raise _Problem(f"magnitude(): expected a vector or a vector field, got {_type(v)}")
        return math.sqrt(v.x * v.x + v.y * v.y + v.z * v.z)

    def _math(self, f, *values, what: str):
        try:
            return f(*values)
        except (ArithmeticError, ValueError) as e:
            raise _Problem(f"{what}: {type(e).__name__}: {e}") from None

    def fn_abs(self, a):
        return abs(_number(a["arg1"], "abs()"))

    def fn_exp(self, a):
        return self._math(math.exp, _number(a["arg1"], "exp()"), what="exp()")

    def fn_log(self, a):
        return self._math(math.log, _number(a["arg1"], "log()"), what="log()")

    def fn_pow(self, a):
        return self._math(math.pow, _number(a["arg1"], "pow()"), _number(a["arg2"], "pow()"), what="pow()")

    def fn_histogram(self, a):
        f = a["arg1"]
        if not isinstance(f, FieldRef):
            raise _Problem(f"histogram(): expected a field, got {_type(f)}")
        bins = _int(a.get("num_bins", 256), "histogram(): num_bins")
        if not 1 <= bins <= 1 << 20:
            raise _Problem(f"histogram(): num_bins must be 1..{1 << 20}, got {bins}")
        lo = None if a.get("min_val") is None else float(_number(a["min_val"], "histogram(): min_val"))
        hi = None if a.get("max_val") is None else float(_number(a["max_val"], "histogram(): max_val"))
        if lo is not None and hi is not None and not lo < hi:
            raise _Problem(f"histogram(): min_val ({lo}) must be smaller than max_val ({hi})")
        return self.data("histogram()").histogram(f.name, bins, lo, hi)

    def _hist(self, h, what: str) -> Histogram:
        if not isinstance(h, Histogram):
            raise _Problem(f"{what}: expected a histogram, got {_type(h)}")
        return h

    def fn_entropy(self, a):
        h = self._hist(a["hist"], "entropy()")
        total = float(h.value.sum())
        p = h.value[h.value != 0] / total
        return float(-(p * np.log(p)).sum())

    def fn_pdf(self, a):
        h = self._hist(a["hist"], "pdf()")
        return dataclasses.replace(h, value=h.value / h.value.sum())

    def fn_cdf(self, a):
        h = self._hist(a["hist"], "cdf()")
        return dataclasses.replace(h, value=np.cumsum(h.value / h.value.sum()))

    def fn_bin(self, a):
        h = self._hist(a["hist"], "bin()")
        if ("bin" in a) == ("val" in a):
            raise _Problem("bin(): give exactly one of bin (an index) or val (a value on the histogram's axis)")
        if "bin" in a and isinstance(a["bin"], float) and not a["bin"].is_integer():
            a = {"val": a["bin"]}  # bin(hist, 0.3): the positional overload taking a value
        if "bin" in a:
            i = _int(a["bin"], "bin(): bin")
            if not 0 <= i < h.num_bins:
                raise _Problem(f"bin(): bin index must be within [0, {h.num_bins - 1}], got {i}")
        else:
            v = float(_number(a["val"], "bin(): val"))
            if not h.min_val <= v <= h.max_val:
                raise _Problem(f"bin(): val must be within the histogram's [{h.min_val}, {h.max_val}], got {v}")
            # max_val itself belongs to the last bin (Ascent would read one past it).
            i = min(int((v - h.min_val) * (h.num_bins / (h.max_val - h.min_val))), h.num_bins - 1)
        return float(h.value[i])

    def fn_quantile(self, a):
        h = self._hist(a["cdf"], "quantile()")
        q = float(_number(a["q"], "quantile(): q"))
        how = a.get("interpolation", "linear")
        kinds = ("linear", "lower", "higher", "midpoint", "nearest")
        if how not in kinds:
            raise _Problem(f"quantile(): interpolation must be one of {', '.join(kinds)}, got {how!r}")
        if not 0 <= q <= 1:
            raise _Problem(f"quantile(): q must be within [0, 1], got {q}")
        c, n = h.value, h.num_bins
        b = int(np.searchsorted(c, q, side="left"))  # the first bin whose cdf reaches q (as Ascent's scan)
        b = min(b, n - 1)
        if c[b] > q:
            b -= 1
        b = max(b, 0)
        w = (h.max_val - h.min_val) / n
        i, j = h.min_val + b * w, h.min_val + (b + 1) * w
        if how == "lower":
            return i
        if how == "higher":
            return j
        if how == "midpoint":
            return (i + j) / 2
        if how == "nearest":
            return i if q - i < j - q else j
        step = c[b + 1] - c[b] if b + 1 < n else 0.0
        return i if step == 0 else i + (j - i) * (q - c[b]) / step

    def fn_bounds(self, a):
        t = a.get("topology")
        if t is not None and not isinstance(t, str):
            raise _Problem(f"bounds(): topology must be a quoted name, got {_type(t)}")
        return self.data("bounds()").bounds()

    def history(self, nodes: dict) -> Any:
        name = nodes["expr_name"].id  # a Name: checked by parse
        rel = self.eval(nodes["relative_index"]) if "relative_index" in nodes else None
        absolute = self.eval(nodes["absolute_index"]) if "absolute_index" in nodes else None
        if (rel is None) == (absolute is None):
            raise _Problem("history(): give exactly one of relative_index or absolute_index")
        past = self.env.history.get(name) or []
        if not past:
            raise _Problem(f"history(): query {name!r} has no values yet")
        if rel is not None:
            r = _int(rel, "history(): relative_index")
            if r < 0:
                raise _Problem("history(): relative_index must be a non-negative integer")
            return past[-1 - r] if r < len(past) else past[-1]  # too far back: the latest (as Ascent)
        i = _int(absolute, "history(): absolute_index")
        if i < 0:
            raise _Problem("history(): absolute_index must be a non-negative integer")
        if i >= len(past):
            raise _Problem(f"history(): found only {len(past)} values of {name!r}, cannot get the one at {i}")
        return past[i]
