"""The API reference of a sched package: every name in its ``__all__``, linked.

A package page ends with::

    ```{eval-rst}
    .. sched-api:: sched_lock
    ```

and this extension writes the reference from the package itself, so that
nothing public can go missing and nothing private can leak in:

* every name in ``__all__`` is documented, grouped (functions, classes,
  exceptions, constants, type aliases). Constants and type aliases that a
  package re-exports from a private module get the ``#:`` comment written
  above them *there* (autodoc alone looks in ``__init__.py`` and finds
  nothing, so it drops them silently). A constant without one fails the
  build.
* names that appear in signatures without being exported (``DurationLike``,
  ``Command``, the payload type variable ``P``) are listed in
  ``sched_signature_types`` in ``conf.py``; each gets an entry, documented by
  the ``#:`` comment on its definition, so every signature links somewhere.
* a reference autodoc writes with a private module path
  (``sched_exclusive._outcome.Outcome``), a standard library class named
  after the module that implements it (``asyncio.locks.Event``), or a name
  imported only for type checking (``timedelta``) resolves to the public
  name it stands for.
* Napoleon reads a first line ``X: text`` of an attribute or property
  docstring as "type X". The project never writes types there (they come
  from annotations), so those docstrings keep the text as written.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import typing
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.ext.intersphinx import resolve_reference_detect_inventory
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

#: The kinds of entry, in the order a reference shows them.
GROUPS = ("Functions", "Classes", "Exceptions", "Constants", "Type aliases")
#: The autodoc directive of each kind.
DIRECTIVES = {
    "Functions": "autofunction",
    "Classes": "autoclass",
    "Exceptions": "autoexception",
    "Constants": "autodata",
    "Type aliases": "autodata",
}
ATTRIBUTE_KINDS = frozenset({"attribute", "property", "data"})


def kind_of(value: object) -> str:
    """Which group of the reference a public object belongs to."""
    if inspect.isclass(value):
        return "Exceptions" if issubclass(value, BaseException) else "Classes"
    if typing.get_origin(value) is not None or isinstance(value, typing.TypeVar):
        return "Type aliases"
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return "Functions"
    return "Constants"


def package_root(module: str) -> str:
    """``sched_lock._flock`` -> ``sched_lock``."""
    return module.partition(".")[0]


def source_of(module_name: str) -> Path:
    """The file of a module of one of our packages, found without importing it.

    (Importing ``sched_interval.__main__`` would run its command line.)
    """
    package, _, rest = module_name.partition(".")
    package_file = importlib.import_module(package).__file__
    assert package_file is not None, package
    return Path(package_file).with_name(f"{rest or '__init__'}.py")


def defining_modules(package: str) -> dict[str, str]:
    """Map each name ``package/__init__.py`` imports from a sibling module to that module.

    Every ``from ._x import NAME as NAME`` counts, including those under
    ``if TYPE_CHECKING:`` that back a lazy (PEP 562) export.
    """
    tree = ast.parse(source_of(package).read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{package}.{node.module}"
    return found


def attribute_doc(module: str, name: str) -> list[str] | None:
    """The ``#:`` comment (or docstring) written above a module-level name, if any."""
    docs = ModuleAnalyzer.for_module(module).find_attr_docs()
    lines = docs.get(("", name))
    return list(lines) if lines else None


def package_modules(package: str) -> list[str]:
    """The package and every module in its folder, private ones included."""
    folder = source_of(package).parent
    private = [p.stem for p in sorted(folder.glob("_*.py")) if not p.stem.startswith("__")]
    return [package] + [f"{package}.{stem}" for stem in private]


def module_doc_of(package: str, name: str) -> tuple[str, list[str]] | None:
    """The first module of the package that documents ``name`` with ``#:``."""
    preferred = defining_modules(package).get(name)
    for module in [preferred, *package_modules(package)]:
        if module is None:
            continue
        lines = attribute_doc(module, name)
        if lines:
            return module, lines
    return None


def definition_text(module: str, name: str) -> str | None:
    """The right-hand side of ``name = ...`` (or ``name: T = ...``) in a module's source."""
    source = source_of(module).read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            value: ast.expr | None = node.value
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
        ):
            value = node.value
        else:
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            text = value.value  # a string alias: TypeAlias = "str | bytes"
        elif value is not None:
            text = ast.get_source_segment(source, value) or ""
        else:
            return None
        # A private alias inside the value (``Sequence[_PathLike]``) is spelt out.
        for private in set(re.findall(r"\b_[A-Za-z]\w*", text)):
            inner = definition_text(module, private)
            if inner:
                text = re.sub(rf"\b{private}\b", inner, text)
        return text
    return None


class SchedApi(SphinxDirective):
    """``.. sched-api:: package``: the whole reference of one package."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        package = self.arguments[0]
        module = importlib.import_module(package)
        groups: dict[str, list[str]] = {group: [] for group in GROUPS}
        for name in module.__all__:
            groups[kind_of(getattr(module, name))].append(name)
        lines = [f".. automodule:: {package}", "   :no-members:", ""]
        for group in GROUPS:
            if not groups[group]:
                continue
            lines += [f".. rubric:: {group}", ""]
            for name in groups[group]:
                lines += [f".. {DIRECTIVES[group]}:: {package}.{name}", ""]
                lines += self.hidden_attributes(package, name, getattr(module, name))
        lines += self.signature_types(package)
        content = StringList(lines, source=f"<sched-api {package}>")
        container = nodes.container()
        self.state.nested_parse(content, self.content_offset, container)
        return list(container.children)

    def hidden_attributes(self, package: str, name: str, cls: object) -> list[str]:
        """Entries for the ``#:``-documented attributes autodoc cannot see.

        A class that claims its package as its ``__module__`` (``Mode``, so that
        its ``repr`` and pickles name the public path) sends autodoc looking for
        its ``#:`` comments in ``__init__.py``; they are in the module that
        defines it.
        """
        module = defining_modules(package).get(name)
        if not inspect.isclass(cls) or cls.__module__ != package or module is None:
            return []
        lines = []
        for (owner, attr), doc in ModuleAnalyzer.for_module(module).find_attr_docs().items():
            if owner != name:
                continue
            value = getattr(cls, attr, None)
            lines.append(f"   .. py:attribute:: {attr}")
            if value is not None:
                shown = value.value if hasattr(value, "value") else value
                lines.append(f"      :value: {shown!r}")
            lines += ["", *(f"      {line}" if line else "" for line in doc), ""]
        return lines

    def signature_types(self, package: str) -> list[str]:
        """Entries for the names the signatures use without exporting them."""
        names = self.config.sched_signature_types.get(package, [])
        if not names:
            return []
        lines = [
            ".. rubric:: Types in signatures",
            "",
            "Names the signatures above use that the package does not export: spell the",
            "type out in your own annotations.",
            "",
        ]
        for name in names:
            found = module_doc_of(package, name)
            if found is None:
                logger.warning(
                    "%s: %s is in sched_signature_types but no module of the package "
                    "documents it: write a #: comment above its definition",
                    package,
                    name,
                )
                continue
            where, doc = found
            value = definition_text(where, name)
            lines.append(f".. py:type:: {name}")
            if value and not value.startswith("TypeVar("):
                lines.append(f"   :canonical: {value}")
            lines.append("")
            lines += [f"   {line}" if line else "" for line in doc]
            if value and value.startswith("TypeVar("):
                lines += ["", "   A type variable: the type the caller chooses."]
            lines.append("")
        return lines


_saved: dict[int, list[str]] = {}


def keep_attribute_text(  # noqa: PLR0917 - Sphinx's event signature
    app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """Before Napoleon: fill re-exported constants' docs; remember attribute text.

    A constant or type alias documented as ``package.NAME`` gets the ``#:``
    comment from the module that defines it. An attribute, property or
    constant's text is kept aside, to be put back after Napoleon.
    """
    if what == "data" and name.count(".") == 1:
        package, _, short = name.partition(".")
        if package in app.config.sched_packages:
            found = module_doc_of(package, short)
            if found is None:
                logger.warning(
                    "%s is exported but undocumented: write a #: comment above its "
                    "definition in %s",
                    name,
                    defining_modules(package).get(short, package),
                )
                lines[:] = []
            else:
                lines[:] = found[1]
    if what in ATTRIBUTE_KINDS:
        _saved[id(lines)] = list(lines)


def restore_attribute_text(  # noqa: PLR0917 - Sphinx's event signature
    app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """After Napoleon: an attribute's docstring is prose, never ``type: description``."""
    saved = _saved.pop(id(lines), None)
    if saved is not None:
        lines[:] = saved


def import_map(package: str) -> dict[str, str | None]:
    """Where each name imported by the package's modules comes from (``None``: ambiguous)."""
    found: dict[str, str | None] = {}
    for module in package_modules(package):
        tree = ast.parse(source_of(module).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    key, target = alias.asname or alias.name, f"{node.module}.{alias.name}"
                    found[key] = target if found.get(key, target) == target else None
    return found


def candidates(app: Sphinx, target: str, module: str | None) -> list[str]:
    """Public names a reference autodoc wrote might stand for, most specific first."""
    packages = app.config.sched_packages
    parts = target.split(".")
    found = []
    if parts[0] in packages and len(parts) > 2 and any(p.startswith("_") for p in parts[1:-1]):
        # sched_exclusive._outcome.Outcome -> sched_exclusive.Outcome
        found.append(f"{parts[0]}.{parts[-1]}")
    elif len(parts) > 2:
        # asyncio.locks.Event -> asyncio.Event
        found += [".".join([*parts[:i], parts[-1]]) for i in range(len(parts) - 2, 0, -1)]
    elif len(parts) == 1 and module and package_root(module) in packages:
        package = package_root(module)
        if target in app.config.sched_signature_types.get(package, []):
            found.append(f"{package}.{target}")
        imported = import_map(package).get(target)
        if imported:
            found.append(imported)
    return found


def resolve_public(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement
) -> nodes.Element | None:
    """Resolve a reference autodoc wrote with a private or implementation path."""
    if node.get("refdomain") != "py":
        return None
    domain = env.domains["py"]
    for candidate in candidates(app, node["reftarget"], node.get("py:module")):
        retry = node.deepcopy()
        retry["reftarget"] = candidate
        found = domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], candidate, retry, contnode
        )
        if found is None:
            found = resolve_reference_detect_inventory(env, retry, contnode)
        if found is not None:
            return found
    return None


PRIVATE_PATH = re.compile(r"^(?P<package>sched_\w+)\.(?:_\w+\.)+(?P<name>\w+)$")


def public_titles(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """A link's tooltip names the public path (``sched_exclusive.Outcome``), not its module's."""
    for reference in doctree.findall(nodes.reference):
        match = PRIVATE_PATH.match(reference.get("reftitle", ""))
        if match and match["package"] in app.config.sched_packages:
            reference["reftitle"] = f"{match['package']}.{match['name']}"


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive and the event handlers."""
    app.add_config_value("sched_packages", [], "env")
    app.add_config_value("sched_signature_types", {}, "env")
    app.add_directive("sched-api", SchedApi)
    app.connect("autodoc-process-docstring", keep_attribute_text, priority=400)
    app.connect("autodoc-process-docstring", restore_attribute_text, priority=600)
    app.connect("missing-reference", resolve_public)
    app.connect("doctree-resolved", public_titles)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
