"""Several processes hammer one job; an append-only journal proves the rules held.

It runs on each backend: one directory, and one name in a real PostgreSQL
database.

Phase 1 (storm): each child fires a few hundred ``run``/``run_or_skip`` calls
with short random jobs, some failing. Phase 2 (races): one request at a time
is fired at the end of another process's run, then everybody stays quiet,
and no demand may be left pending. The journal (see
``sched_exclusive_stress_child.py``) proves, for both phases:

* no two runs overlapped;
* the counter's history is consistent and never exceeded the capacity;
* every recorded request was taken by a holder whose run then started —
  so a run started after the request arrived — or is still recorded, behind
  a deferral warning, for the next acquisition.

``SCHED_SOAK=1`` multiplies the work by ten (a soak of several minutes).
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sched_exclusive_testkit import World
from sched_testing import Child

SOAK = os.environ.get("SCHED_SOAK") == "1"
SCALE = 10 if SOAK else 1
# ``python -c`` code running the script named by its first argument as __main__.
RUN_SCRIPT = "import runpy, sys; del sys.argv[0]; runpy.run_path(sys.argv[0], run_name='__main__')"
CHILD = str(Path(__file__).with_name("sched_exclusive_stress_child.py"))
DEFERRALS = (
    "rerun cap reached; deferring queued demand",
    "cycle gate closed; deferring queued demand",
)


@dataclass
class Verdict:
    """What the journal shows."""

    runs: int = 0
    enqueued: int = 0
    taken: int = 0
    outstanding: list[int] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)


def check_journal(lines: list[str], capacity: int, final_count: int) -> Verdict:
    """Check the journal's invariants; return what it counted."""
    verdict = Verdict()
    running: str | None = None
    count = 0
    outstanding: list[int] = []  # journal positions of recorded, untaken requests
    awaiting_start: dict[str, int] = {}  # taker -> position of its take
    deferred_at: list[int] = []
    for position, line in enumerate(lines):
        kind, tag, *rest = line.split(" ")
        if kind == "start":
            assert running is None, f"line {position}: {tag} started while {running} ran"
            running = tag
            verdict.runs += 1
            awaiting_start.pop(tag, None)
        elif kind == "end":
            assert tag == running, f"line {position}: {tag} ended but {running} ran"
            running = None
        elif kind == "cnt":
            before, after = int(rest[0]), int(rest[1])
            assert count == before, f"line {position}: counter was {count}, not {before}"
            assert 0 <= after <= capacity, f"line {position}: counter {after} > {capacity}"
            if after == before + 1:
                verdict.enqueued += 1
                outstanding.append(position)
            else:
                assert after < before, f"line {position}: bad transition {before}->{after}"
                # Counts are fungible: match the newest requests, leaving the
                # oldest for the deferral check below.
                for _ in range(before - after):
                    outstanding.pop()
                    verdict.taken += 1
                assert tag not in awaiting_start, f"line {position}: {tag} took twice, no run"
                awaiting_start[tag] = position
            count = after
        elif kind == "log":
            message = " ".join(rest)
            if message.startswith(DEFERRALS):
                deferred_at.append(position)
        elif kind == "res":
            verdict.outcomes[rest[0]] = verdict.outcomes.get(rest[0], 0) + 1
        else:  # pragma: no cover - a malformed line
            pytest.fail(f"line {position}: unknown journal line {line!r}")
    assert running is None, "a run never ended"
    assert {} == awaiting_start, f"requests taken but never run: {awaiting_start}"
    assert final_count == count, "the journal's counter differs from the file"
    for position in outstanding:
        assert any(at > position for at in deferred_at), (
            f"request recorded at line {position} is neither served nor deferred"
        )
    verdict.outstanding = outstanding
    return verdict


def where(world: World) -> str:
    """How the child names the job: the directory, or ``postgres:NAME``."""
    return world.label if world.kind == "flock" else f"postgres:{world.label}"


def spawn(world: World, journal: Path, tag: str, capacity: int, seed: int, *mode: str) -> Child:
    return Child(  # the child script is a file: run it as __main__
        RUN_SCRIPT,
        CHILD,
        where(world),
        str(journal),
        tag,
        str(capacity),
        str(seed),
        *mode,
    )


@pytest.mark.slow
@pytest.mark.timeout(1800 if SOAK else 120)
@pytest.mark.parametrize("capacity", [1, 3])
def test_storm_then_races(world: World, tmp_path: Path, capacity: int) -> None:
    """Phase 1: no overlap, bounded counter, every request served or deferred.
    Phase 2: a request racing a run's end is always served; nothing left pending."""
    seed = random.randrange(2**32)
    journal = tmp_path / "journal"
    children: list[Child] = []
    try:
        for index in range(4):
            children.append(
                spawn(
                    world,
                    journal,
                    f"p{index}",
                    capacity,
                    seed + index,
                    "storm",
                    str(250 * SCALE),
                )
            )
        for child in children:
            assert "ready" == child.read_line()
        for child in children:
            child.write_line("go")
        for child in children:
            while (line := child.read_line()) != "done":
                assert line in {"ran", "ran-queued", "queued", "discarded", "skipped"}, line
        ex = world.exclusive(queue_capacity=capacity)
        storm = check_journal(journal.read_text().splitlines(), capacity, ex.pending())
        assert 4 * 250 * SCALE == sum(storm.outcomes.values()), f"seed {seed}"
        assert storm.enqueued > 0, f"seed {seed}: the storm never queued"
        for child in children:
            assert 0 == child.finish(), child.stderr_text()

        # Phase 2: single requests against the end of a run, then quiet.
        journal.unlink()
        ex.run(lambda: None)  # serve what phase 1 deferred, if anything
        rng = random.Random(seed)
        holder = spawn(world, journal, "h", capacity, seed, "holder")
        requester = spawn(world, journal, "r", capacity, seed + 1, "requester")
        children += [holder, requester]
        assert ("ready", "ready") == (holder.read_line(), requester.read_line())
        outcomes: dict[str, int] = {}
        for _ in range(300 * SCALE):
            holder.write_line(f"go {rng.randrange(0, 300)}")
            assert "ending" == holder.read_line()
            requester.write_line(f"go {rng.randrange(0, 60)}")
            while (line := holder.read_line()) == "ending":  # it ran our request as a rerun
                pass
            assert line in {"ran", "ran-queued"}, line
            answer = requester.read_line()
            outcomes[answer] = outcomes.get(answer, 0) + 1
            assert 0 == ex.pending(), f"seed {seed}: demand left pending ({answer})"
        races = check_journal(journal.read_text().splitlines(), capacity, 0)
        assert [] == races.outstanding
        assert races.enqueued == races.taken
        print(f"seed {seed}: storm {storm}, races {outcomes}", file=sys.stderr)
    finally:
        for child in children:
            child.reap()
