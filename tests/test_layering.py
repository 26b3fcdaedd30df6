"""The layers: ``insitu/`` names nothing above it, and the project's modules import no circle.

Imports point down: ``adaptors -> render, solvers -> insitu``. The runtime reaches the
algorithms above it only through the entry points the packages declare (insitu/plugins.py).
Both tests read the source (AST and tokens), so imports inside functions count too.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("insitu", "adaptors", "render", "solvers")
ABOVE = ("adaptors", "render", "solvers")
# A module above the runtime named in text: "render.gl", "solvers.eikonal:update_block",
# "adaptors/scenes.py". The words alone ("the render stage") are not names.
DOTTED = re.compile(r"(?<![\w.])(?:%s)[./][A-Za-z_]" % "|".join(ABOVE))

# Upward names allowed to stay in insitu/: a found name must be among these.
KNOWN_NAMES: set[tuple[str, str]] = set()  # (file, name) allowed to stay; none

# Import circles (strongly connected modules) allowed to stay: a circle found must lie
# within one of these.
KNOWN_CYCLES: list[frozenset] = []  # none left; a new circle fails the test


def _files(package: str, suffixes=(".py",)) -> list[str]:
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, package)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(suffixes)]
    return out


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[: -len(".py")].split(os.sep)
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(line, imported module, names imported from it)`` for every import that runs:
    top level, in functions and in classes; not those under ``if TYPE_CHECKING``."""
    found = []
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, target, tuple(a.name for a in node.names)))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            found.append((node.lineno, node.args[0].value, ()))
    return found


def _parse(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


def names_above_insitu() -> set[tuple[str, int, str]]:
    """``(file, line, what)`` for every import of, and every text naming, a module above
    ``insitu/``: imports (any depth), strings and comments of its modules (tokens), and its
    other files (the page, scripts)."""
    found = set()
    for path in _files("insitu", (".py", ".html", ".sh", ".js", ".txt", ".json", ".yaml")):
        rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if path.endswith(".py"):
            for line, target, _ in _imports(_parse(path), _module_name(path), path.endswith("__init__.py")):
                if target.split(".")[0] in ABOVE:
                    found.add((rel, line, f"import {target}"))
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type in (tokenize.STRING, tokenize.COMMENT):
                    for m in DOTTED.finditer(tok.string):
                        line = tok.start[0] + tok.string.count("\n", 0, m.start())
                        found.add((rel, line, _word(tok.string, m.start())))
        else:
            for i, line in enumerate(text.splitlines(), 1):
                found.update((rel, i, _word(line, m.start())) for m in DOTTED.finditer(line))
    return found


def _word(text: str, start: int) -> str:
    """The dotted name beginning at `start`, up to its second part (``render.image``)."""
    return re.match(r"[\w]+[./][\w]+", text[start:]).group(0).replace("/", ".")


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules importing it runs (a package stands for its ``__init__``).

    ``from P import n`` runs module ``P.n`` when there is one, else ``P``; ``import a.b.c``
    also runs the packages ``a`` and ``a.b``, which count unless the importer is inside
    them (then they are already running: every package would be in a circle with its own
    modules otherwise).
    """
    paths = {_module_name(p): p for pkg in PACKAGES for p in _files(pkg)}
    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        edges = graph.setdefault(mod, set())
        for _, target, names in _imports(_parse(path), mod, path.endswith("__init__.py")):
            subs = {f"{target}.{n}" for n in names if f"{target}.{n}" in paths}
            runs = subs | ({target} if len(subs) < len(names) or not names else set())
            parts = target.split(".")
            runs |= {".".join(parts[:i]) for i in range(1, len(parts))}
            edges |= {t for t in runs if t in paths and t != mod and not mod.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(frozenset(comp))
    return out


# -- the checks themselves are checked ----------------------------------------------------

def test_the_checkers_find_what_they_look_for():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []
    hits = [m.group(0) for m in DOTTED.finditer("render.gl's get_context, solvers.eikonal:update_block, "
                                                "adaptors/scenes.py; the render stage; prerender.x; a.render.b")]
    assert hits == ["render.g", "solvers.e", "adaptors/s"]
    tree = ast.parse("import render.gl\nfrom .. import x\ndef f():\n    from ..render import y\n"
                     "    importlib.import_module('solvers.eikonal')\n"
                     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import adaptors\n")
    assert sorted(t for _, t, _ in _imports(tree, "insitu.pool.worker", False)) == [
        "insitu", "insitu.render", "render.gl", "solvers.eikonal", "typing"]  # not the TYPE_CHECKING one


def test_the_graph_sees_imports_in_functions():
    g = import_graph()
    assert "insitu.pool.kernels" in g["insitu.pool.worker"]
    assert "insitu.plugins" in g["insitu.pool.worker"]
    # adaptors.scenes imports the renderers inside functions as well as at the top
    assert any(m.startswith("render") for m in g["adaptors.scenes"])


# -- the layering -------------------------------------------------------------------------

def test_insitu_names_nothing_above_it():
    found = names_above_insitu()
    new = sorted(f for f in found if (f[0], f[2]) not in KNOWN_NAMES)
    assert not new, "insitu/ names modules above it (reach them through entry points, insitu/plugins.py):\n" + \
        "\n".join(f"  {f}:{line}: {what}" for f, line, what in new)


def test_lower_layers_import_no_adaptor():
    g = import_graph()
    up = sorted((m, t) for m, ts in g.items() for t in ts
                if m.split(".")[0] in ("render", "solvers", "insitu") and t.split(".")[0] == "adaptors")
    assert not up, f"imports up into adaptors/: {up}"


def test_no_import_circles():
    found = cycles(import_graph())
    new = sorted(sorted(c) for c in found if not any(c <= known for known in KNOWN_CYCLES))
    assert not new, f"import circles: {new}"
