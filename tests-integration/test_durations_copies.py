"""The packages that take durations keep byte-identical copies of one module."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _copies() -> dict[str, bytes]:
    return {
        str(path.relative_to(ROOT)): path.read_bytes()
        for path in sorted(ROOT.glob("packages/*/src/*/_durations.py"))
    }


def test_durations_copies_are_identical() -> None:
    """Every private ``_durations.py`` is byte-for-byte the same as the others."""
    copies = _copies()
    assert copies, "no _durations.py copy found"
    reference = copies["packages/sched-interval/src/sched_interval/_durations.py"]
    differing = sorted(name for name, content in copies.items() if content != reference)
    assert [] == differing


def test_durations_copies_are_not_exported() -> None:
    """The copies stay private: no package re-exports the coercion helpers."""
    for path in ROOT.glob("packages/*/src/*/__init__.py"):
        text = path.read_text()
        assert "to_timedelta" not in text, path
