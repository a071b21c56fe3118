"""Every package's ``__all__`` is exactly what it exports (anyio's test_all_attributes, for six).

A name a user can reach as ``package.name`` without an underscore is public:
it must be listed in ``__all__``, and everything listed must resolve. Lazily
loaded names (PEP 562 ``__getattr__``) count: ``dir()`` must show them, so
tab completion and ``from package import *`` agree with the documentation.
Submodules are ignored (``sched_trigger._client`` appearing as an attribute is
not an export), and so is the ``annotations`` feature flag that ``from
__future__ import annotations`` leaves behind.
"""

from __future__ import annotations
import __future__

import importlib
import types
from pathlib import Path

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
        if isinstance(value, (types.ModuleType, __future__._Feature)):
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
    """``__version__`` is the installed distribution's version, served lazily."""
    from importlib.metadata import version

    module = importlib.import_module(import_name)
    assert version(import_name.replace("_", "-")) == module.__version__
    assert "__version__" not in module.__all__
