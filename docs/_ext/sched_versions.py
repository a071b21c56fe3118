"""No "Added in version X" for a version the package has not reached.

A ``versionadded``, ``versionchanged``, ``deprecated`` or ``versionremoved``
marker names the release a change ships in. One naming a version above the
package's own (``0.2.0`` in a package at ``0.1.0``) tells a reader of a
release that does not exist, and implies an earlier one without the change.
So the build refuses it: every docstring autodoc reads and every page is
checked against the version of the package it belongs to (a page's markers
against the newest version of any package), and each marker above it is a
warning, which ``nox -s docs`` (``-W``) makes an error. To mark a change for
the next release, bump the package's version in its ``pyproject.toml`` first.

``tests-integration/test_docs_versions.py`` runs the same check over the
sources without building the site. This module imports nothing from Sphinx
at import time, so that test runs where Sphinx is not installed.
"""

from __future__ import annotations

import re
from importlib import metadata
from typing import Any

#: A version marker, as written in a docstring (``.. versionadded:: 0.2.0``) or
#: a MyST page (```` ```{versionchanged} 0.2.0 ````, ``:::{deprecated} 1.0``).
MARKER = re.compile(
    r"(?:\.\.\s+|[`:]{3,}\{)"
    r"(?P<kind>versionadded|versionchanged|versionremoved|deprecated)"
    r"(?:::|\})\s*(?P<version>[0-9][0-9A-Za-z.+-]*)"
)


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``"0.10.1rc1"`` -> ``(0, 10, 1)``."""
    numbers = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits[0]))
        if digits.end() != len(part):
            break
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def markers_above(text: str, version: str) -> list[str]:
    """Each version marker in *text* that names a version above *version*.

    Args:
        text: a docstring or a page.
        version: the version of the package the text documents.

    Returns:
        The markers, as written (``versionadded 0.2.0``), in order.
    """
    return [
        f"{m['kind']} {m['version']}"
        for m in MARKER.finditer(text)
        if release(m["version"]) > release(version)
    ]


def _refuse(where: str, text: str, version: str, dist: str) -> None:
    from sphinx.util import logging

    for marker in markers_above(text, version):
        logging.getLogger(__name__).warning(
            "%s: %s names a version %s has not reached (it is %s): remove the marker, "
            "or bump the version in its pyproject.toml first",
            where,
            marker,
            dist,
            version,
        )


def check_docstring(  # noqa: PLR0917 - Sphinx's event signature
    app: Any, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """A docstring's markers against the version of the package that defines it."""
    package = name.partition(".")[0]
    if package not in app.config.sched_packages:
        return
    dist = package.replace("_", "-")
    _refuse(name, "\n".join(lines), metadata.version(dist), dist)


def check_page(app: Any, docname: str, source: list[str]) -> None:
    """A page's markers against the version of its package (any package for a shared page)."""
    packages = app.config.sched_packages
    dists = [p.replace("_", "-") for p in packages]
    own = docname.removeprefix("packages/")
    if own in dists:
        dists = [own]
    versions = {dist: metadata.version(dist) for dist in dists}
    dist = max(versions, key=lambda d: release(versions[d]))
    _refuse(docname, source[0], versions[dist], dist)


def setup(app: Any) -> dict[str, Any]:
    """Check every docstring autodoc reads and every page read."""
    app.connect("autodoc-process-docstring", check_docstring)
    app.connect("source-read", check_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
