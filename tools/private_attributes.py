"""A linter: no code reaches into a private attribute of the standard library.

``python tools/private_attributes.py [PATH ...]`` (run by ``nox -s lint``)
prints each finding as ``path:line: code`` and exits 1 when there is one;
without paths it reads ``packages/`` (the code and its tests).

A private attribute (``_cond``, ``_waiters``) of a standard-library object can
change in any release, and code leaning on one breaks on an upgrade or, worse,
deadlocks in a corner. It reads each module with :mod:`ast` and reports each access to a
name with one leading underscore on an object that is not ours:

* ``x._name`` and ``getattr``/``setattr``/``hasattr``/``delattr`` (or
  ``monkeypatch.setattr``) with the constant ``"_name"``;
* ``from module import _name`` and ``import _module`` outside our packages.

An object is ours, and the access allowed, when it is

* ``self`` or ``cls`` of a method (or of a function nested in one);
* any object inside a class that itself defines ``_name`` (``other._interval``
  in ``Schedule.__eq__``);
* a module, class or function of ours: defined in the module, or imported
  from a ``sched_*`` module or relatively, and what hangs off it
  (``sched_cmd._child._HAVE_PIDFD``).

Dunder names (``__init__``) and enum's sunder names (``_value_``) are public,
and so are the documented exceptions in `DOCUMENTED`.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "packages"

#: Names with a leading underscore that the standard library documents as public.
DOCUMENTED = frozenset(
    {
        "_exit",  # os._exit
        "_asdict",  # namedtuple
        "_fields",
        "_field_defaults",
        "_make",
        "_replace",
    }
)
#: Modules with a leading underscore that are documented: ``_thread``, and typeshed's
#: ``_typeshed`` (type-checking only, never imported at run time).
DOCUMENTED_MODULES = frozenset({"__future__", "_thread", "_typeshed"})
#: Accesses the check cannot prove are ours, that are: (file, name) and why.
KNOWN_OURS = {
    # Spy patches sched_lock's own _pwrite and _ftruncate; the module it patches
    # arrives as a parameter annotated `object`.
    ("packages/sched-lock/tests/test_lock.py", "_pwrite"),
    ("packages/sched-lock/tests/test_lock.py", "_ftruncate"),
}
_ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def is_private(name: str) -> bool:
    """One leading underscore, not a dunder, not an enum sunder, not documented."""
    if not name.startswith("_") or name in DOCUMENTED:
        return False
    dunder = name.startswith("__") and name.endswith("__")
    sunder = len(name) > 2 and name.endswith("_") and not name.startswith("__")
    return not (dunder or sunder)


def is_first_party(module: str | None, level: int, local: frozenset[str] = frozenset()) -> bool:
    """A relative import, or a module of ours: ``sched_*`` (their test kits too), or one
    of the *local* modules checked alongside (``bench/_common.py``)."""
    top = (module or "").split(".")[0]
    return level > 0 or top.startswith("sched_") or top in local


@dataclass(frozen=True)
class _Scope:
    """What is known to be ours inside one function or class body."""

    typed: frozenset[str] = frozenset()  # local names holding objects of ours (self, x: Lock)
    class_attributes: frozenset[str] = frozenset()  # private names the enclosing classes define
    self_attributes: frozenset[str] = frozenset()  # self.<name> holding objects of ours


_UNION_FORMS = frozenset({"Optional", "Union"})


@dataclass
class Finder(ast.NodeVisitor):
    """Collects ``line: source`` of each private access on an object that is not ours."""

    source: str
    local: frozenset[str] = frozenset()  # top-level modules checked alongside: ours
    ours: set[str] = field(default_factory=set)  # module-level names of ours
    findings: list[str] = field(default_factory=list)
    scope: _Scope = field(default_factory=_Scope)

    def run(self) -> list[str]:
        """Visit the module and return the findings."""
        tree = ast.parse(self.source)
        for node in ast.walk(tree):  # imports anywhere (TYPE_CHECKING, functions) count
            if isinstance(node, ast.Import):
                self.ours.update(
                    alias.asname or alias.name.split(".")[0]
                    for alias in node.names
                    if is_first_party(alias.name, 0, self.local)
                )
            elif isinstance(node, ast.ImportFrom) and is_first_party(
                node.module, node.level, self.local
            ):
                self.ours.update(alias.asname or alias.name for alias in node.names)
        for node in tree.body:  # the module's own classes and functions are ours
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                self.ours.add(node.name)
        self.scope = _Scope(typed=frozenset(self._typed_names(tree.body, self.scope)))
        self.visit(tree)
        return self.findings

    def report(self, node: ast.AST) -> None:
        """Record *node* as a finding."""
        text = ast.get_source_segment(self.source, node) or ast.dump(node)
        self.findings.append(f"{getattr(node, 'lineno', '?')}: {text}")

    # -- what is ours --------------------------------------------------------------

    def is_ours_type(self, annotation: ast.expr | None) -> bool:
        """An annotation naming a class of ours (``Lock``, ``Server[P]``, ``Job | None``)."""
        if annotation is None:
            return False
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return False
        if isinstance(annotation, ast.BinOp):
            return self.is_ours_type(annotation.left) or self.is_ours_type(annotation.right)
        if isinstance(annotation, ast.Subscript):
            if _last_name(annotation.value) in _UNION_FORMS:
                inner = annotation.slice
                parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
                return any(self.is_ours_type(part) for part in parts)
            return self.is_ours_type(annotation.value)
        return self._rooted_in_ours(annotation)

    def _rooted_in_ours(self, node: ast.expr) -> bool:
        """A module, class or function of ours, or what hangs off one (``sched_cmd._child``)."""
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name) and node.id in self.ours

    def is_ours(self, node: ast.expr, scope: _Scope) -> bool:
        """Tell whether the expression *node* is an object of ours."""
        if isinstance(node, ast.Name):
            return node.id in scope.typed or node.id in self.ours
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                return node.value.id in scope.typed and node.attr in scope.self_attributes
            return self._rooted_in_ours(node)  # self.proc._x: a Popen's, not ours
        if isinstance(node, ast.Call):  # Lock(...), sched_cmd.run(...)
            return self._rooted_in_ours(node.func)
        return False

    def _typed_names(self, body: list[ast.stmt], scope: _Scope) -> set[str]:
        """Names bound in *body* (not in nested functions) to objects of ours."""
        typed = set(scope.typed)
        for _ in range(2):  # a second pass sees names bound from names bound later
            for node in _walk_body(body):
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    if self.is_ours_type(node.annotation):
                        typed.add(node.target.id)
                elif isinstance(node, ast.Assign) and self.is_ours(
                    node.value,
                    _Scope(frozenset(typed), scope.class_attributes, scope.self_attributes),
                ):
                    typed.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return typed

    def _self_attributes(self, node: ast.ClassDef) -> set[str]:
        """The attributes of ``self`` that a class binds to objects of ours."""
        found = set()
        for item in node.body:
            if (
                isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and self.is_ours_type(item.annotation)
            ):
                found.add(item.target.id)
            if not isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            scope = self._function_scope(item, _Scope(), method=True)
            for stmt in _walk_body(item.body):
                target: ast.expr | None = None
                ours = False
                if isinstance(stmt, ast.AnnAssign):
                    target = stmt.target
                    ours = self.is_ours_type(stmt.annotation) or (
                        stmt.value is not None and self.is_ours(stmt.value, scope)
                    )
                elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    target, ours = stmt.targets[0], self.is_ours(stmt.value, scope)
                if (
                    ours
                    and isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    found.add(target.attr)
        return found

    def _function_scope(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, outer: _Scope, *, method: bool
    ) -> _Scope:
        arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        typed = set(outer.typed)
        if method and arguments and arguments[0].arg in ("self", "cls"):
            typed.add(arguments[0].arg)
        typed.update(a.arg for a in arguments if self.is_ours_type(a.annotation))
        scope = _Scope(frozenset(typed), outer.class_attributes, outer.self_attributes)
        return _Scope(
            frozenset(self._typed_names(node.body, scope)),
            outer.class_attributes,
            outer.self_attributes,
        )

    def visit_Import(self, node: ast.Import) -> None:
        """``import _private`` outside our packages is a finding."""
        for alias in node.names:
            if (
                not is_first_party(alias.name, 0, self.local)
                and any(is_private(part) for part in alias.name.split("."))
                and alias.name not in DOCUMENTED_MODULES
            ):
                self.report(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        """A private name, or a private module, from outside our packages is a finding."""
        module = node.module or ""
        if is_first_party(module, node.level, self.local):
            return
        private_module = any(is_private(part) for part in module.split("."))
        if (private_module and module not in DOCUMENTED_MODULES) or any(
            is_private(alias.name) for alias in node.names
        ):
            self.report(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """Inside a class, the private names it defines are ours on any object."""
        defined = set()
        for item in ast.walk(node):
            if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                defined.add(item.attr)
            elif isinstance(item, ast.Name) and isinstance(item.ctx, ast.Store):
                defined.add(item.id)
            elif isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(item.name)
            elif _is_slots(item) or _is_setattr_on_self(item):
                defined.update(_strings(item))
        outer = self.scope
        for expr in [*node.bases, *node.keywords, *node.decorator_list]:
            self.visit(expr)
        self.scope = _Scope(
            outer.typed - {"self", "cls"},  # a nested class's self is its own
            outer.class_attributes | defined,
            frozenset(self._self_attributes(node)),
        )
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                self._visit_function(item, method=True)
            else:
                self.visit(item)
        self.scope = outer

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        """A function outside a class body: its first parameter is not ``self``."""
        self._visit_function(node, method=False)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        """As `visit_FunctionDef`."""
        self._visit_function(node, method=False)

    def _visit_function(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool
    ) -> None:
        outer = self.scope
        for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)
        if not method:  # a plain function's `self` (one patched onto a class) is not ours
            outer = _Scope(outer.typed, outer.class_attributes, outer.self_attributes)
        self.scope = self._function_scope(node, outer, method=method)
        for statement in node.body:
            self.visit(statement)
        self.scope = outer

    # -- the accesses --------------------------------------------------------------

    def check(self, node: ast.AST, base: ast.expr, name: str) -> None:
        """Report *node* when it reads the private *name* off a *base* that is not ours."""
        if not is_private(name):
            return
        if isinstance(base, ast.Name) and name in self.scope.class_attributes:
            return  # other._interval in Schedule.__eq__
        if not self.is_ours(base, self.scope):
            self.report(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """``x._name``."""
        self.check(node, node.value, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        """``getattr(x, "_name")`` and friends, ``monkeypatch.setattr(x, "_name", v)``."""
        called = _last_name(node.func)
        if (
            called in _ATTRIBUTE_FUNCTIONS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            self.check(node, node.args[0], node.args[1].value)
        self.generic_visit(node)


def _last_name(node: ast.expr) -> str | None:
    """``getattr`` for ``getattr``, ``setattr`` for ``monkeypatch.setattr``."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _walk_body(body: list[ast.stmt]) -> list[ast.AST]:
    """Every node of *body*, without descending into nested functions and classes."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop(0)
        found.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _is_slots(node: ast.AST) -> bool:
    """``__slots__ = (...)`` (or annotated)."""
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, ast.AnnAssign)
        else []
    )
    return any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets)


def _is_setattr_on_self(node: ast.AST) -> bool:
    """``object.__setattr__(self, "_name", value)`` or ``setattr(self, "_name", value)``."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    first = node.args[0]
    return (
        called in ("setattr", "__setattr__")
        and isinstance(first, ast.Name)
        and (first.id in ("self", "cls"))
    )


def _strings(node: ast.AST) -> list[str]:
    return [
        item.value
        for item in ast.walk(node)
        if isinstance(item, ast.Constant) and isinstance(item.value, str)
    ]


def find_private_accesses(source: str, local: frozenset[str] = frozenset()) -> list[str]:
    """The private accesses on objects not ours in *source*, as ``line: code``; the
    top-level modules named in *local* are ours."""
    return Finder(source, local).run()


# --- the check over the tree ---------------------------------------------------------------


def modules(paths: Iterable[Path]) -> list[Path]:
    """The Python modules at or under *paths* (Go test vectors aside)."""
    found: set[Path] = set()
    for path in paths:
        found.update([path] if path.is_file() else path.rglob("*.py"))
    return sorted(p for p in found if "go_vectors" not in p.parts)


def findings(paths: Iterable[Path]) -> list[str]:
    """Every private access on an object not ours in the modules at *paths*, as
    ``path:line: code`` (paths relative to the repository when inside it)."""
    checked = modules(paths)
    local = frozenset(p.stem for p in checked)
    found = []
    for path in checked:
        shown = path.resolve()
        name = str(shown.relative_to(ROOT)) if shown.is_relative_to(ROOT) else str(path)
        for finding in find_private_accesses(path.read_text(encoding="utf-8"), local):
            if not any(name == known and f'"{attr}"' in finding for known, attr in KNOWN_OURS):
                found.append(f"{name}:{finding}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Check *argv* (paths; ``packages/`` when empty); print findings; 1 if any, else 0."""
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)] or [PACKAGES]
    if not modules(paths):
        print(f"private_attributes: no Python module under {', '.join(map(str, paths))}")
        return 2
    found = findings(paths)
    for line in found:
        print(line)
    if found:
        print(
            f"private_attributes: {len(found)} access(es) to a private attribute of code "
            "we did not write: use its public API (see the module docstring)"
        )
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
