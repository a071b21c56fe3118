"""The built documentation site says what the code says, and nothing garbled.

These tests read the HTML that ``nox -s docs`` has just built (the session
passes its folder as ``SCHED_DOCS_HTML``; elsewhere they are skipped). They
catch whole classes of defect rather than one entry each:

* a public name (one in a package's ``__all__``) missing from its package's
  reference, as constants and aliases re-exported from private modules once
  were;
* a "Type" or "Return type" field holding prose (Napoleon reading "X: text"
  as a type) or a stray "Return type" on an entry that documents no return;
* a private module path (``sched_exclusive._outcome.Outcome``) shown to a
  reader;
* Markdown emphasis left as literal asterisks (``**`Job`**s``);
* "the spec", which a reader cannot know: say "the Go library".
"""

from __future__ import annotations

import html.parser
import importlib
import os
import re
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = Path(os.environ.get("SCHED_DOCS_HTML", ROOT / "docs" / "_build" / "html"))
IMPORT_NAMES = sorted(
    p.parent.name.replace("-", "_") for p in (ROOT / "packages").glob("*/pyproject.toml")
)
pytestmark = pytest.mark.skipif(
    "SCHED_DOCS_HTML" not in os.environ,
    reason="reads the site nox -s docs builds (it sets SCHED_DOCS_HTML)",
)


def inventory() -> dict[str, str]:
    """The Python objects of the built site (``objects.inv``): name -> page."""
    raw = (HTML / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):  # four header lines, then zlib
        header_end = raw.index(b"\n", header_end) + 1
    found = {}
    for line in zlib.decompress(raw[header_end:]).decode().splitlines():
        match = re.match(r"(?x)(.+?)\s+(py:\S+)\s+-?\d+\s+(\S*)", line)
        if match:
            found[match[1]] = match[3].partition("#")[0]
    return found


class Page(html.parser.HTMLParser):
    """The visible prose of a page (no code, signatures, scripts) and its field lists."""

    SKIP = frozenset({"pre", "code", "script", "style", "head"})
    VOID = frozenset({"br", "img", "input", "meta", "link", "hr", "wbr", "source"})

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.text: list[str] = []
        self.fields: list[list[tuple[str, str]]] = []  # each field list: (name, body) pairs
        self._open: list[tuple[str, str]] = []  # (tag, role) of each open element
        self._name: list[str] = []  # the text of the field name being read
        self._body: list[str] = []  # the text of the field body being read
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        role = ""
        if tag in self.SKIP or (tag == "dt" and "sig" in classes):
            role = "skip"
        elif tag == "dl" and "field-list" in classes:
            self.fields.append([])
        elif tag == "dt" and self._open and self._open[-1][1] == "fields":
            role, self._name = "name", []
        elif tag == "dd" and self._open and self._open[-1][1] == "fields":
            role, self._body = "body", []
        if tag == "dl" and "field-list" in classes:
            role = "fields"
        self._open.append((tag, role))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            open_tag, role = self._open.pop()
            if role == "name":
                self.fields[-1].append(("".join(self._name).strip().rstrip(":"), ""))
            elif role == "body":
                name = self.fields[-1][-1][0]
                self.fields[-1][-1] = (name, " ".join("".join(self._body).split()))
            if open_tag == tag:
                return

    def handle_data(self, data: str) -> None:
        roles = {role for _, role in self._open}
        if "name" in roles:
            self._name.append(data)
        if "body" in roles:
            self._body.append(data)
        if "skip" not in roles:
            self.text.append(data)


def pages() -> list[Path]:
    """Every page of the site a reader sees (not the index or search pages)."""
    skip = {"genindex.html", "search.html", "py-modindex.html"}
    return sorted(
        p
        for p in HTML.rglob("*.html")
        if p.name not in skip and not p.relative_to(HTML).parts[0].startswith("_")
    )


def page_id(path: Path) -> str:
    """The page's path in the site."""
    return str(path.relative_to(HTML))


@pytest.mark.parametrize("import_name", IMPORT_NAMES)
def test_every_public_name_is_in_the_reference(import_name: str) -> None:
    """Each name in ``__all__`` is documented on its package's page."""
    module = importlib.import_module(import_name)
    page = f"packages/{import_name.replace('_', '-')}.html"
    documented = inventory()
    missing = [name for name in module.__all__ if documented.get(f"{import_name}.{name}") != page]
    assert [] == missing, (
        f"{missing} are public but not in {page}: a constant or type alias needs a "
        "#: comment above its definition (docs/_ext/sched_api.py documents __all__)"
    )


#: A type as the reference shows it: names, brackets, ``|``, ``,``, literals, ``...``.
TYPE_TEXT = re.compile(r"""(?:[\w.]+|\[|\]|\||,|\(|\)|'[^']*'|"[^"]*"|\.\.\.|\s)+""")


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_type_fields_hold_types(path: Path) -> None:
    """A "Type" or "Return type" field holds a type, never a sentence."""
    prose = [
        f"{name}: {body}"
        for fields in Page(path).fields
        for name, body in fields
        if name in ("Type", "Return type")
        and (not TYPE_TEXT.fullmatch(body) or re.search(r"[a-z]+ [a-z]+ [a-z]+", body))
    ]
    assert [] == prose, (
        "a docstring's first line 'X: text' reads as a type to Napoleon: reword it, or "
        "see keep_attribute_text in docs/_ext/sched_api.py"
    )


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_a_return_type_comes_with_its_returns(path: Path) -> None:
    """A "Return type" field only follows a documented "Returns" (no stray one on a class)."""
    stray = [
        fields
        for fields in Page(path).fields
        if any(name == "Return type" for name, _ in fields)
        and not any(name == "Returns" for name, _ in fields)
    ]
    assert [] == stray, "a Return type field with no Returns field beside it"


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_no_private_path_is_shown(path: Path) -> None:
    """No page shows a private module path such as ``sched_exclusive._outcome``."""
    text = path.read_text(encoding="utf-8")
    private = sorted(set(re.findall(r"\bsched_[a-z]+\._[a-z]\w*(?:\.\w+)*", text)))
    assert [] == private, (
        "a reference names a private module: docs/_ext/sched_api.py resolves it to the "
        "public name if the object is in __all__ (or in sched_signature_types, conf.py)"
    )


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_no_literal_markup_is_shown(path: Path) -> None:
    """No Markdown emphasis survives as asterisks (``**`Job`**s`` renders them literally)."""
    text = "".join(Page(path).text)
    literal = re.findall(r"\*\*[^*\s][^*\n]{0,80}\*\*\w*", text)
    assert [] == literal, (
        "emphasis shown as asterisks: in Markdown, **bold** must end at a word's end "
        "(write '**`Job`** objects', not '**`Job`**s')"
    )


@pytest.mark.parametrize("path", pages(), ids=page_id)
def test_the_spec_is_not_mentioned(path: Path) -> None:
    """A reader does not know "the spec": pages say "the Go library" and link to it."""
    text = " ".join("".join(Page(path).text).split())
    found = re.findall(r"[^.]*\b[Tt]he spec\b[^.]*", text)
    assert [] == found, "say 'the Go library' (github.com/cplieger/scheduler, v4) instead"


def excerpted_files(path: Path) -> set[str]:
    """The example files the source of a built page shows excerpts of (their names)."""
    source = ROOT / "docs" / path.relative_to(HTML).with_suffix(".md")
    if not source.is_file():
        return set()
    text = source.read_text(encoding="utf-8")
    return {Path(f).name for f in re.findall(r"<!--\s*excerpt:\s*(\S+)", text)}


@pytest.mark.parametrize("path", [p for p in pages() if excerpted_files(p)], ids=page_id)
def test_an_excerpted_example_is_one_click_away(path: Path) -> None:
    """A page that shows excerpts links to each whole example file, served by the site
    itself (a download of the very file), so that a reader gets what the blocks come from."""
    hrefs = re.findall(r'href="([^"#]+)"', path.read_text(encoding="utf-8"))
    served = {
        (path.parent / href).resolve()
        for href in hrefs
        if "://" not in href and (path.parent / href).resolve().is_file()
    }
    examples = ROOT / "docs" / "examples"
    missing = [
        name
        for name in sorted(excerpted_files(path))
        if not any(
            f.name == name and f.read_bytes() == (examples / name).read_bytes() for f in served
        )
    ]
    assert [] == missing, "link each excerpt's file: From [`docs/examples/F`](examples/F):"
