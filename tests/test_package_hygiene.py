"""Package hygiene (issue 28 item 3): no import cycle inside rt_runtime, no module using another's private names.

An AST walk over ``rt_runtime/`` (no module is imported, so it takes well under a second).

Import cycles. An edge A -> B is a *module-level* import in A of rt_runtime module B: a statement
in A's body, also inside a module-level ``if``/``try``/``with``/class body, and also under ``if
TYPE_CHECKING:`` (a type a module needs is a dependency a reader follows: the circle the issue names
in ``sched/`` runs through such imports). ``from p import name`` counts as an edge to ``p`` and, when
``p.name`` is a module, to it; importing ``p.q.r`` also runs ``p`` and ``p.q``, so the edge reaches
every package on the way that A is not itself inside. Imports inside a function body are lazy (they
run when the function is called, after every module has loaded) and are *not* counted: a cycle
made of them cannot fail at import time, and it is left to review.

Private names. A name with one leading underscore (``_x``, not a dunder) belongs to the module that
defines it. Found, and refused, wherever the import sits (lazy ones too):

- ``from m import _x`` where ``m`` is another rt_runtime module;
- ``m._x`` where ``m`` is bound by ``import``/``from ... import`` to another rt_runtime module, or to
  a name imported from one (a class or function: ``Cls._attr``, ``fn._attr``);
- ``obj._x`` on any other object (a parameter, a local: ``s._cancel_outputs()``, ``rt._wd_thread``)
  and ``getattr/hasattr/setattr/delattr(obj, "_x")``, when ``_x`` is a private name some module of
  the package defines (a function, a class, a variable, a ``self._x``) and this module does not:
  without types, "defined elsewhere in rt_runtime, not here" stands for "another module's".

What that cannot tell: an object of another module whose private attribute this module happens to
define too (not found); a third-party object's private attribute that rt_runtime also defines
(found: allow it by name, saying whose it is); a private name reached through a re-export under a
public alias, or ``getattr`` with a computed name (not found).

ALLOWED lists the violations that stand today in files being rewritten under issue 28; it must be
exact: an entry that no longer occurs fails too, so the list only shrinks.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rt_runtime"

# (importer, imported) module-level import edges that close a cycle today, each in a file being
# rewritten under issue 28 (sched/: helper E). An edge removed there must be removed here too.
ALLOWED_CYCLE_EDGES: set[tuple[str, str]] = set()

# (module, what is used) for each private-name use that stands today, with who removes it:
ALLOWED_PRIVATE: set[tuple[str, str]] = {
    # rclpy's private Executor API, which DeadlineExecutor overrides (ros/deadline/executor.py) and the wait
    # loop calls as rclpy's own _wait_for_ready_callbacks does: rclpy's names, reached through our subclass
    ("rt_runtime.ros.deadline.waitset", "ex._clock"),
    ("rt_runtime.ros.deadline.waitset", "ex._make_handler"),
    ("rt_runtime.ros.deadline.waitset", "ex._take_subscription"),
}


def module_name(path: Path) -> str:
    """``rt_runtime/sched/let.py`` -> ``rt_runtime.sched.let``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=1)
def load() -> tuple[dict[str, ast.Module], set[str]]:
    """Every module of the package parsed (once per session), and the names that are packages."""
    trees, packages = {}, set()
    for p in sorted(PACKAGE.rglob("*.py")):
        name = module_name(p)
        trees[name] = ast.parse(p.read_text(), str(p))
        if p.name == "__init__.py":
            packages.add(name)
    return trees, packages


def absolute(module: str, node: ast.ImportFrom, packages: set[str]) -> str:
    """The module a ``from ... import`` names, relative levels resolved against ``module``."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if module in packages else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported (function bodies left out)."""
    out: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        st = todo.pop()
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            out.append(st)
        for child in ast.iter_child_nodes(st):
            if isinstance(child, ast.stmt):
                todo.append(child)
            elif isinstance(child, ast.excepthandler):
                todo.extend(child.body)
    return out


def targets(module: str, node: ast.Import | ast.ImportFrom, known: set[str], packages: set[str]) -> set[str]:
    """The rt_runtime modules an import statement runs: the named one(s) and the packages on the way."""
    if isinstance(node, ast.Import):
        named = [a.name for a in node.names]
    else:
        base = absolute(module, node, packages)
        named = [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
    out = set()
    for name in named:
        if not name.startswith("rt_runtime"):
            continue
        while name not in known and "." in name:   # ``import a.b.c`` of a name inside a module
            name = name.rsplit(".", 1)[0]
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            step = ".".join(parts[:i])
            # a package that ``module`` lives in has been run already: no edge to it
            if step in known and not (module == step or module.startswith(step + ".")):
                out.add(step)
    return out


def import_graph(trees: dict[str, ast.Module], packages: set[str]) -> dict[str, set[str]]:
    """Module -> the rt_runtime modules its module-level imports run."""
    known = set(trees)
    return {m: set().union(*(targets(m, n, known, packages) for n in module_level_imports(t)))
            for m, t in trees.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import), sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]   # iterative: no recursion limit on a deep package
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1 or v in graph[v]:
                    out.append(sorted(comp))
    return sorted(out)


def edges_in_cycles(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every edge whose two ends lie in one cycle."""
    comp = {m: i for i, c in enumerate(cycles(graph)) for m in c}
    return {(a, b) for a, bs in graph.items() for b in bs if a in comp and comp.get(b) == comp[a]}


def is_private(name: str) -> bool:
    """One leading underscore, not a dunder."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# Public API spelt with an underscore (NamedTuple's), not private to anyone.
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
_REFLECT = ("getattr", "hasattr", "setattr", "delattr")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def defined_names(nodes: list[ast.AST]) -> set[str]:
    """Every name a module (its ``nodes``) defines: functions, classes, variables, parameters, keywords
    and the attributes it sets on ``self``, ``cls`` or its own functions and classes."""
    own: set[str] = set()
    defs: set[str] = {"self", "cls"}
    stored: list[tuple[str, str]] = []   # (object, attribute) of every ``name.attr = ...``
    for node in nodes:
        t = type(node)
        if t is ast.Name:
            if type(node.ctx) is ast.Store:
                own.add(node.id)
        elif t is ast.Attribute:
            if type(node.ctx) is ast.Store and type(node.value) is ast.Name:
                stored.append((node.value.id, node.attr))
        elif t in _DEFS:
            own.add(node.name)
            defs.add(node.name)
        elif (t is ast.keyword or t is ast.arg) and node.arg:
            own.add(node.arg)
    own.update(attr for obj, attr in stored if obj in defs)
    return own


def private_uses(module: str, nodes: list[ast.AST], own: set[str], known: set[str], packages: set[str],
                 package_private: set[str]) -> set[str]:
    """Descriptions of the uses in ``module`` (its AST ``nodes``; ``own``: the names it defines) of other
    modules' private names, by the module docstring's rules; ``package_private``: the private names
    some module of the package defines."""
    out: set[str] = set()
    bound: dict[str, str] = {}   # local name -> the rt_runtime module it is, or that it came from
    foreign: set[str] = set()    # local names bound to modules (or their names) outside rt_runtime
    for node in nodes:
        t = type(node)
        if t is ast.Attribute or t is ast.Call:
            continue
        if t is ast.ImportFrom:
            base = absolute(module, node, packages)
            if not base.startswith("rt_runtime"):
                foreign.update(a.asname or a.name for a in node.names)
                continue
            if base == module:
                continue
            for a in node.names:
                if is_private(a.name) and f"{base}.{a.name}" not in known:
                    out.add(f"from {base} import {a.name}")
                bound[a.asname or a.name] = base
        elif t is ast.Import:
            for a in node.names:
                local = a.asname or a.name.split(".")[0]
                if not a.name.startswith("rt_runtime"):
                    foreign.add(local)
                elif a.name != module:
                    bound[local] = a.name if a.asname else local
    for node in nodes:
        t = type(node)
        if t is ast.Attribute and node.attr[:1] == "_" and is_private(node.attr) \
                and node.attr not in PUBLIC_UNDERSCORED:
            v = node.value
            if isinstance(v, ast.Name) and v.id in bound:
                out.add(f"{v.id}.{node.attr} ({bound[v.id]})")
            elif node.attr in package_private and node.attr not in own \
                    and not (isinstance(v, ast.Name) and (v.id in ("self", "cls") or v.id in foreign)):
                out.add(f"{ast.unparse(v)}.{node.attr}")
        elif t is ast.Call and type(node.func) is ast.Name and node.func.id in _REFLECT \
                and len(node.args) >= 2:
            obj, key = node.args[0], node.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in package_private \
                    and key.value not in own and not (isinstance(obj, ast.Name) and obj.id in ("self", "cls")):
                out.add(f"{node.func.id}({ast.unparse(obj)}, {key.value!r})")
    return out


def all_private_uses() -> set[tuple[str, str]]:
    """(module, description) for every private-name use in the package."""
    trees, packages = load()
    nodes = {m: list(ast.walk(t)) for m, t in trees.items()}
    own = {m: defined_names(ns) for m, ns in nodes.items()}
    private = {n for names in own.values() for n in names if is_private(n)}
    return {(m, d) for m, ns in nodes.items() for d in private_uses(m, ns, own[m], set(trees), packages, private)}


def test_no_import_cycle_inside_rt_runtime() -> None:
    trees, packages = load()
    graph = import_graph(trees, packages)
    assert "rt_runtime.sched.scheduler" in graph["rt_runtime.sched.runtime"], "the walk finds no imports"
    closing = edges_in_cycles(graph)
    stale = sorted(ALLOWED_CYCLE_EDGES - closing)
    assert not stale, f"these allowed edges no longer close a cycle: remove them from ALLOWED_CYCLE_EDGES: {stale}"
    rest = {m: bs - {b for a, b in ALLOWED_CYCLE_EDGES if a == m} for m, bs in graph.items()}
    left = cycles(rest)
    assert not left, "import cycles inside rt_runtime (module-level imports): " + "; ".join(
        " <-> ".join(c) + " via " + ", ".join(f"{a} -> {b}" for a, b in sorted(edges_in_cycles(rest))
                                          if a in c) for c in left)


def test_no_module_uses_another_modules_private_names() -> None:
    found = all_private_uses()
    stale = sorted(ALLOWED_PRIVATE - found)
    assert not stale, f"these allowed uses are gone: remove them from ALLOWED_PRIVATE: {stale}"
    new = sorted(found - ALLOWED_PRIVATE)
    assert not new, "private names of other modules used (make the name public, or add a declared hook): " + \
        "; ".join(f"{m}: {d}" for m, d in new)


def test_the_walk_finds_what_it_claims_to() -> None:
    # A cycle through a TYPE_CHECKING import, a lazy import left out, every private-use form.
    src = {
        "rt_runtime.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "rt_runtime.b": "from . import a\ndef f():\n    from .c import C\n",
        "rt_runtime.c": "from .a import _x\nfrom . import b\nimport rt_runtime.a as ra\nfrom .b import B\n"
                        "ra._y\nB._z\nhasattr(obj, '_w')\nhasattr(self, '_v')\nself._u\nb.__doc__\n",
        "rt_runtime": "",
    }
    trees = {m: ast.parse(s) for m, s in src.items()}
    graph = import_graph(trees, {"rt_runtime"})
    assert cycles(graph) == [["rt_runtime.a", "rt_runtime.b"]]
    assert "rt_runtime.c" not in graph["rt_runtime.b"]
    nodes = list(ast.walk(trees["rt_runtime.c"]))
    uses = private_uses("rt_runtime.c", nodes, defined_names(nodes), set(trees), {"rt_runtime"},
                        {"_x", "_y", "_z", "_w", "_v", "_u"})
    assert uses == {"from rt_runtime.a import _x", "ra._y (rt_runtime.a)", "B._z (rt_runtime.b)",
                    "hasattr(obj, '_w')"}
