"""The public surface of every package, held by one test (anyio's test_all_attributes,
trio's test_classes_are_final).

A name a user can reach as ``package.name`` without an underscore is public:
it must be listed in ``__all__``, and everything listed must resolve. Lazily
loaded names (PEP 562 ``__getattr__``) count: ``dir()`` must show them, so
tab completion and ``from package import *`` agree with the documentation.
Submodules are ignored (``sched_trigger._client`` appearing as an attribute is
not an export), and so is the ``annotations`` feature flag that ``from
__future__ import annotations`` leaves behind. What type checkers see of the
same surface is held by ``tests-typing/``.
"""

from __future__ import annotations
import __future__

import enum
import importlib
import types
from importlib.metadata import version
from pathlib import Path
from typing import Protocol

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The import names of the packages in the tree (``packages/sched-lock`` -> ``sched_lock``).
IMPORT_NAMES = sorted(
    p.parent.name.replace("-", "_") for p in (ROOT / "packages").glob("*/pyproject.toml")
)


def public_names(module: types.ModuleType) -> set[str]:
    """The names ``dir(module)`` shows that a user would take for exports."""
    names = set()
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if isinstance(value, (types.ModuleType, type(__future__.annotations))):
            continue
        names.add(name)
    return names


@pytest.mark.parametrize("import_name", IMPORT_NAMES)
def test_all_lists_every_public_name(import_name: str) -> None:
    """Each public name in ``dir(package)`` is in ``__all__``, and nothing else is."""
    module = importlib.import_module(import_name)
    public, listed = public_names(module), set(module.__all__)
    expected: dict[str, list[str]] = {
        "public but not in __all__": [],
        "in __all__ but not in dir()": [],
    }
    assert expected == {
        "public but not in __all__": sorted(public - listed),
        "in __all__ but not in dir()": sorted(listed - public),
    }


@pytest.mark.parametrize("import_name", IMPORT_NAMES)
def test_every_listed_name_resolves(import_name: str) -> None:
    """Each name in ``__all__`` is an attribute of the package (lazy ones included)."""
    module = importlib.import_module(import_name)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert [] == missing
    assert len(set(module.__all__)) == len(module.__all__), "duplicates in __all__"


@pytest.mark.parametrize("import_name", IMPORT_NAMES)
def test_star_import_gives_all(import_name: str) -> None:
    """``from package import *`` binds exactly ``__all__``."""
    namespace: dict[str, object] = {}
    exec(f"from {import_name} import *", namespace)
    namespace.pop("__builtins__", None)
    module = importlib.import_module(import_name)
    assert sorted(module.__all__) == sorted(namespace)


@pytest.mark.parametrize("import_name", IMPORT_NAMES)
def test_version_comes_from_metadata(import_name: str) -> None:
    """``__version__`` is the installed distribution's version, served lazily; any other
    missing name is an ``AttributeError`` that names it."""
    module = importlib.import_module(import_name)
    assert version(import_name.replace("_", "-")) == module.__version__
    assert "__version__" not in module.__all__
    with pytest.raises(AttributeError, match=rf"^module '{import_name}' has no attribute 'nope'$"):
        getattr(module, "nope")  # noqa: B009 - the name is the point


#: Protocols that are ``typing.Protocol`` for type checkers only: at run time their base is
#: ``object``, so that importing the package loads no ``typing`` (issue 22 item 8).
#: tests-typing/ checks that mypy takes each for a protocol.
TYPE_CHECKING_PROTOCOLS = frozenset({"sched_cmd.CommandRunner"})


def open_classes(module: types.ModuleType) -> dict[str, str]:
    """The public classes of *module* that a user could subclass, each with why it is not final.

    Final are: classes marked ``typing.final`` (which sets ``__final__``) and
    enumerations with members, which Python refuses to extend. Exempt, as in
    trio's test: protocols (made to be implemented) and the error classes
    the package itself derives its other errors from (the root of its
    hierarchy, there to be caught).
    """
    found = {}
    for name in module.__all__:
        cls = getattr(module, name)
        if not isinstance(cls, type) or getattr(cls, "__final__", False):
            continue
        if Protocol in cls.__bases__ or f"{module.__name__}.{name}" in TYPE_CHECKING_PROTOCOLS:
            continue
        if issubclass(cls, BaseException) and cls.__subclasses__():
            continue
        if issubclass(cls, enum.Enum) and len(cls):
            with pytest.raises(TypeError):
                types.new_class("Sub", (cls,))
            continue
        found[name] = f"{cls.__module__}.{cls.__qualname__} has no __final__"
    return found


@pytest.mark.parametrize("import_name", IMPORT_NAMES)
def test_every_public_class_is_final(import_name: str) -> None:
    """Every public class is final (``typing.final``), but protocols and error bases."""
    assert {} == open_classes(importlib.import_module(import_name))
