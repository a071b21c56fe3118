"""Fencing tokens: one per cycle, strictly increasing per name, across processes and crashes.

Most tests run on each backend (the ``world`` fixture): a directory, whose
tokens live in ``cycle.fence``, and a name in a real PostgreSQL database,
whose tokens live in its row.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import pickle
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sched_testing
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sched_exclusive_testkit import (
    FlockWorld,
    PgWorld,
    World,
    asking_for_tokens,
    close_postgres_sessions,
    hooked,
)
from sched_testing import Child

from sched_exclusive import (
    CoordinationError,
    Exclusive,
    ExclusiveError,
    FencedOut,
    Outcome,
    RunError,
    fence,
    fencing_token,
)
from sched_exclusive._files import MAX_TOKEN, next_token

TESTS = str(Path(__file__).resolve().parent)


def now_us() -> int:
    return time.time_ns() // 1000


def test_every_cycle_of_a_call_has_a_larger_token(world: World) -> None:
    """The call's own run, each queued rerun and the handoff each get a token larger
    than every token before them."""
    ex = world.exclusive()
    backend = hooked(ex)
    # A request slips in just before our first release: we take the lock back for it.
    backend.before_release[1] = lambda: world.exclusive().run(lambda: None)
    tokens: list[int] = []

    def job() -> None:
        tokens.append(fencing_token())
        if len(tokens) == 1:
            assert Outcome.QUEUED == world.exclusive().run(lambda: None)  # a rerun

    assert Outcome.RAN_QUEUED == ex.run(job)
    assert 3 == len(tokens)  # the own run, the rerun, the handoff
    assert sorted(set(tokens)) == tokens
    assert all(token > 0 for token in tokens)
    later: list[int] = []
    assert Outcome.RAN == world.exclusive().run_or_skip(lambda: later.append(fencing_token()))
    assert later[0] > tokens[-1]


def test_asyncio_cycles_have_tokens(world: World) -> None:
    """``arun`` and ``arun_or_skip`` jobs read the token of their cycle, reruns included."""
    ex = world.exclusive()
    tokens: list[int] = []

    async def job() -> None:
        tokens.append(fencing_token())
        if len(tokens) == 1:
            assert Outcome.QUEUED == world.exclusive().run(lambda: None)

    async def main() -> None:
        assert Outcome.RAN_QUEUED == await ex.arun(job)
        assert Outcome.RAN == await ex.arun_or_skip(job)

    asyncio.run(main(), debug=True)
    assert 3 == len(tokens)
    assert sorted(set(tokens)) == tokens


def test_fencing_token_outside_a_job() -> None:
    """Outside a job there is no cycle: RuntimeError, as with lock_lost()."""
    with pytest.raises(RuntimeError, match=r"fencing_token\(\) is only available inside a job"):
        fencing_token()


def test_fence_needs_postgres(tmp_path: Path) -> None:
    """fence() in a job coordinated through a directory says what is wrong."""
    failures: list[BaseException] = []

    def job() -> None:
        try:
            fence(object())
        except RuntimeError as exc:
            failures.append(exc)

    assert Outcome.RAN == Exclusive(tmp_path).run(job)
    assert "needs a job run by Exclusive.postgres" in str(failures[0])
    assert "fencing_token()" in str(failures[0])
    with pytest.raises(RuntimeError, match=r"fence\(\) is only available inside a job"):
        fence(object())


def test_fenced_out_names_the_job_and_both_tokens() -> None:
    """FencedOut is an ExclusiveError and an OSError (ENOLCK); it names the job, its
    token and the newer one, and pickles."""
    error = FencedOut("nightly", 41, 42)
    assert isinstance(error, ExclusiveError)
    assert isinstance(error, OSError)
    assert errno.ENOLCK == error.errno
    assert Outcome.RAN == error.outcome
    assert "'nightly'" in str(error)
    assert "cycle 41" in str(error)
    assert "(42)" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert ("nightly", 41, 42, str(error)) == (copy.name, copy.token, copy.newer, str(copy))


# --- flock: dir/cycle.fence -------------------------------------------------------------


def test_the_fence_file_holds_the_last_token(tmp_path: Path) -> None:
    """``cycle.fence`` is one decimal line: the last token drawn; the token follows the
    clock (microseconds) and never repeats."""
    tokens: list[int] = []
    before = now_us()
    for _ in range(3):
        Exclusive(tmp_path).run(lambda: tokens.append(fencing_token()))
    assert sorted(set(tokens)) == tokens
    assert tokens[0] >= before
    assert b"%d\n" % tokens[-1] == (tmp_path / "cycle.fence").read_bytes()


def test_a_go_holders_cycles_take_no_token(tmp_path: Path) -> None:
    """A holder that knows nothing of ``cycle.fence`` (the Go library, an older version)
    leaves it alone; the next cycle here still gets a larger token."""
    tokens: list[int] = []
    ex = Exclusive(tmp_path)
    ex.run(lambda: tokens.append(fencing_token()))
    world = FlockWorld(str(tmp_path))
    world.hold().unlock()  # a foreign cycle: lock, holder line, release
    ex.run(lambda: tokens.append(fencing_token()))
    assert tokens[0] < tokens[1]


GARBAGE = [
    b"x",
    b"\x00" * 30,
    b"12a\n",
    b"7\n7\n",
    b" 5\n",
    b"99999999999999999999\n",  # 20 digits: past a bigint
    b"5" * 18,  # torn: no newline
]


@pytest.mark.parametrize("garbage", GARBAGE)
def test_a_garbage_fence_file_never_lowers_the_token(
    tmp_path: Path, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """Content that is not one decimal line continues from the clock, above every token
    drawn before, says so once, and is replaced by a clean line."""
    caplog.set_level(logging.WARNING, "sched_exclusive")
    before: list[int] = []
    ex = Exclusive(tmp_path)
    ex.run(lambda: before.append(fencing_token()))
    (tmp_path / "cycle.fence").write_bytes(garbage)
    tokens: list[int] = []
    ex.run(lambda: tokens.append(fencing_token()))
    ex.run(lambda: tokens.append(fencing_token()))
    assert before[0] < tokens[0] < tokens[1]
    assert b"%d\n" % tokens[1] == (tmp_path / "cycle.fence").read_bytes()
    messages = [r.getMessage() for r in caplog.records]
    assert 1 == len(messages), messages
    assert messages[0].startswith("cycle fence file held no token")


def test_an_empty_or_missing_fence_file_starts_from_the_clock(tmp_path: Path) -> None:
    """An empty file (or none) is a fresh start: the clock, which every earlier token of
    the directory is below (a cycle takes far longer than a microsecond)."""
    (tmp_path / "cycle.fence").write_bytes(b"")
    before = now_us()
    tokens: list[int] = []
    Exclusive(tmp_path).run(lambda: tokens.append(fencing_token()))
    assert tokens[0] >= before


def test_an_unwritable_fence_file_leaves_the_cycle_without_a_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A fence file that cannot be written (here a directory in its place) never stops a
    cycle (the Go library's files still work); the job asking for its token gets a
    CoordinationError that names the file, and the failure is logged once."""
    caplog.set_level(logging.WARNING, "sched_exclusive")
    (tmp_path / "cycle.fence").mkdir()
    ex = Exclusive(tmp_path)
    job, failures = asking_for_tokens()

    assert Outcome.RAN == ex.run(job)
    assert Outcome.RAN == ex.run(job)
    assert 2 == len(failures)
    assert errno.EISDIR == failures[0].errno
    assert "cycle.fence" in str(failures[0])
    messages = [r.getMessage() for r in caplog.records]
    assert 1 == len(messages), messages
    assert messages[0].startswith("cycle fence not written")


tokens_in_file = st.integers(1, 10**18)


def torn(content: bytes, line: bytes, cut: int) -> bytes:
    """``content`` after the first ``cut`` bytes of ``line`` were written over it in
    place (a write cut short by a power cut reaches the disk in order)."""
    return line[:cut] + content[cut:]


@given(old=tokens_in_file, step=st.integers(1, 10**12), cut=st.integers(0, 20))
def test_a_torn_write_never_lowers_the_token_even_when_the_clock_steps_back(
    old: int, step: int, cut: int
) -> None:
    """A token write cut short anywhere leaves a line no smaller than the old one, so
    the next token is above it even with a clock that stepped back (to zero here).
    (A longer line, a token with more digits, comes once the clock passes 10**16 µs,
    in the year 2286.)"""
    new = old + step
    if len(b"%d" % new) != len(b"%d" % old):
        new = int(b"9" * len(b"%d" % old))
    if new == old:
        return
    token, _ = next_token(torn(b"%d\n" % old, b"%d\n" % new, cut), 0)
    assert token > old


@given(content=st.binary(max_size=64), clock=st.integers(0, 10**16))
def test_next_token_of_any_content(content: bytes, clock: int) -> None:
    """Whatever the file holds, the next token is positive, at least the clock, above
    what a clean line says, and says whether it recovered."""
    token, recovered = next_token(content, clock)
    assert token >= max(clock, 1)
    if clean(content):
        assert token > int(content[:-1])
    assert recovered == (bool(content) and not clean(content))


def clean(content: bytes) -> bool:
    """Whether ``content`` is one decimal line (that fits a bigint)."""
    return 1 < len(content) < 21 and content.endswith(b"\n") and content[:-1].isdigit()


def test_a_token_past_a_bigint_is_refused(tmp_path: Path) -> None:
    """The token must fit a bigint (stores compare it there): past it, the cycle has none."""
    (tmp_path / "cycle.fence").write_bytes(b"%d\n" % MAX_TOKEN)
    job, failures = asking_for_tokens()

    assert Outcome.RAN == Exclusive(tmp_path).run(job)
    assert errno.EOVERFLOW == failures[0].errno


# --- several processes ---------------------------------------------------------------------

# Fires CALLS calls at WHERE (a directory or postgres:NAME), mixing run and
# run_or_skip; each job appends its token to the journal with one write(2) on an
# O_APPEND descriptor while it holds the cycle lock, so the journal's order is the
# order the cycles ran in.
TOKEN_CHILD = """
import os, random, sys
from sched_exclusive import Exclusive, ExclusiveError, fencing_token
where, journal, tag, calls, seed = sys.argv[1:6]
if where.startswith("postgres:"):
    ex = Exclusive.postgres(os.environ["SCHED_TEST_POSTGRES"], where[9:])
else:
    ex = Exclusive(where)
fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
rng = random.Random(int(seed))
def job():
    os.write(fd, f"{fencing_token()} {tag}\\n".encode())
print("ready", flush=True)
sys.stdin.readline()
for _ in range(int(calls)):
    try:
        (ex.run if rng.random() < 0.6 else ex.run_or_skip)(job)
    except ExclusiveError as exc:
        print(f"error {exc!r}", file=sys.stderr, flush=True)
        raise
print("done", flush=True)
"""


def where(world: World) -> str:
    return world.label if world.kind == "flock" else f"postgres:{world.label}"


def test_tokens_across_processes(world: World, tmp_path: Path, children: list[Child]) -> None:
    """3 processes x 200 calls on one name, run and run_or_skip mixed: every cycle's
    token is distinct and larger than the one before it in the order cycles ran; a
    process started afterwards continues above the largest."""
    journal = tmp_path / "journal"
    seed = uuid.uuid4().int % 2**32
    for index in range(3):
        children.append(
            Child(TOKEN_CHILD, where(world), str(journal), f"p{index}", "200", str(seed + index))
        )
    for child in children:
        assert "ready" == child.read_line()
    for child in children:
        child.write_line("go")
    for child in children:
        assert "done" == child.read_line()
        assert 0 == child.finish(), child.stderr_text()
    ran = [int(line.split()[0]) for line in journal.read_text().splitlines()]
    assert len(ran) >= 100, f"seed {seed}"
    assert sorted(set(ran)) == ran, f"seed {seed}"
    late = Child(TOKEN_CHILD, where(world), str(journal), "late", "5", str(seed))
    children.append(late)
    assert "ready" == late.read_line()
    late.write_line("go")
    assert "done" == late.read_line()
    assert 0 == late.finish(), late.stderr_text()
    after = [int(line.split()[0]) for line in journal.read_text().splitlines()][len(ran) :]
    assert after, "the late process ran no cycle"
    assert min(after) > max(ran)
    assert sorted(set(after)) == after


# --- a model of tokens, with crashes between any two steps of a cycle's start --------------

# Serves "crash N WHERE" lines: forks a process that makes one run() call on WHERE (a
# directory or postgres:NAME) and kills itself (SIGKILL) at the N-th point of the
# library's code where a signal could land (between any two steps: each system call,
# each statement); the job reports its token first. Answers "TOKEN|- killed|done".
CRASH_SERVER = """
import os, sys
sys.path[:0] = sys.argv[1].split(os.pathsep)  # the test kits: this suite's and the shared one
from sched_exclusive_testkit import Interrupter, library_code
import sched_lock._flock, sched_lock._slot
from sched_exclusive import Exclusive, ExclusiveError, fencing_token, _coalesce, _exclusive, _files
from sched_exclusive import _arguments, _driver, _postgres
flock = library_code(
    _arguments, _coalesce, _driver, _exclusive, _files, sched_lock._flock, sched_lock._slot
)
postgres = library_code(_arguments, _coalesce, _driver, _exclusive, _postgres)
print("ready", flush=True)
for line in sys.stdin:
    _, n, where = line.split(maxsplit=2)
    where = where.strip()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if where.startswith("postgres:"):
            ex, codes = Exclusive.postgres(os.environ["SCHED_TEST_POSTGRES"], where[9:]), postgres
        else:
            ex, codes = Exclusive(where), flock
        def job():
            os.write(w, b"%d" % fencing_token())
        with Interrupter(codes, int(n), crash=True):
            try:
                ex.run(job)
            except ExclusiveError:
                pass
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    token = b""
    while chunk := os.read(r, 64):
        token += chunk
    os.close(r)
    how = "killed" if os.WIFSIGNALED(status) else "done"
    print(f"{token.decode() or '-'} {how}", flush=True)
"""
#: The crash server of this test module, started on first use (see ``crash_server``).
_CRASH_SERVERS: list[Child] = []


@pytest.fixture(scope="module", autouse=True)
def _reap_crash_server() -> Iterator[None]:
    yield
    while _CRASH_SERVERS:
        _CRASH_SERVERS.pop().reap()


def crash_server() -> Child:
    """The module's crash server (one process: each crash is a fork of it)."""
    if not _CRASH_SERVERS:
        kits = os.pathsep.join([TESTS, str(Path(sched_testing.__file__).parent)])
        server = Child(CRASH_SERVER, kits)
        _CRASH_SERVERS.append(server)
        assert "ready" == server.read_line()
    return _CRASH_SERVERS[0]


class Tokens(RuleBasedStateMachine):
    """Cycles here, cycles in processes that crash at any point of their start, and (for
    a directory) whatever a torn write, a lost page cache or another writer can leave in
    ``cycle.fence``: every token a job sees is above every token seen before."""

    backend = "flock"

    def __init__(self) -> None:
        super().__init__()
        if self.backend == "flock":
            self.dir = Path(tempfile_dir())
            self.world: World = FlockWorld(str(self.dir))
        else:
            self.world = PgWorld(os.environ["SCHED_TEST_POSTGRES"])
        self.seen: list[int] = []
        self.lines: list[bytes] = []  # every clean line the file has held, in order

    def teardown(self) -> None:
        self.world.close()
        if self.backend == "flock":
            import shutil

            shutil.rmtree(self.dir)
        else:
            close_postgres_sessions()

    def see(self, token: int) -> None:
        assert not self.seen or token > max(self.seen), (token, self.seen[-3:])
        self.seen.append(token)
        if self.backend == "flock":
            self.lines.append((self.dir / "cycle.fence").read_bytes())

    @rule(queue=st.booleans())
    def a_cycle(self, queue: bool) -> None:
        tokens: list[int] = []
        ex = self.world.exclusive()
        outcome = (ex.run if queue else ex.run_or_skip)(lambda: tokens.append(fencing_token()))
        assert outcome in (Outcome.RAN, Outcome.RAN_QUEUED)
        for token in tokens:
            self.see(token)

    @rule(n=st.integers(1, 120))
    def a_process_crashes(self, n: int) -> None:
        server = crash_server()
        server.write_line(f"crash {n} {where(self.world)}")
        token, how = server.read_line().split()
        assert how in ("killed", "done")
        if token != "-":
            self.see(int(token))

    @precondition(lambda self: self.backend == "flock" and bool(self.lines))
    @rule(cut=st.integers(0, 20))
    def a_torn_write(self, cut: int) -> None:
        """The write of the next token cut short (power lost mid-write)."""
        current = (self.dir / "cycle.fence").read_bytes()
        following = b"%d\n" % next_token(current, now_us())[0]
        (self.dir / "cycle.fence").write_bytes(torn(current, following, cut))

    @precondition(lambda self: self.backend == "flock" and bool(self.lines))
    @rule(back=st.integers(0, 20))
    def a_lost_write(self, back: int) -> None:
        """The page cache lost the last writes (a power cut): an earlier line, or none.

        The machine then boots again, and its clock has passed every token drawn
        before the cut (a torn write may have left a line up to a few hundred
        milliseconds ahead of the clock, and the next cycle drew above it): tokens
        survive a power cut by the clock, which this model cannot move, so it waits.
        """
        older = [b"", *self.lines][max(len(self.lines) - back, 0)]
        (self.dir / "cycle.fence").write_bytes(older)
        while self.seen and now_us() <= max(self.seen):
            # sleep-ok: the reboot after the power cut, in real time (bounded by the lead)
            time.sleep(0.001)

    @precondition(lambda self: self.backend == "flock")
    @rule(garbage=st.binary(max_size=40).filter(lambda content: not clean(content)))
    def another_writer(self, garbage: bytes) -> None:
        """Bytes that are not one decimal line: a disk fault, another program."""
        (self.dir / "cycle.fence").write_bytes(garbage)

    @invariant()
    def the_lock_is_free(self) -> None:
        assert self.world.lock_is_free()


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="sched-exclusive-tokens-")


# Each crash forks a process (tens of milliseconds): a fifth of the profile's examples
# (20 in CI, 1,000 with SCHED_HYPOTHESIS_PROFILE=deep).
EXAMPLES = max(settings().max_examples // 5, 10)
TestTokens = Tokens.TestCase
TestTokens.settings = settings(stateful_step_count=15, max_examples=EXAMPLES)


class PostgresTokens(Tokens):
    """The same model over a real PostgreSQL database (no file to tear there)."""

    backend = "postgres"


TestTokensPostgres = pytest.mark.usefixtures("postgres_required")(PostgresTokens.TestCase)
TestTokensPostgres.settings = settings(stateful_step_count=10, max_examples=EXAMPLES)


def test_run_error_keeps_the_cycle_going_without_a_token(tmp_path: Path) -> None:
    """A job that lets the missing-token error propagate fails like any job: the call
    reports it in its RunError, with the run it came from."""
    (tmp_path / "cycle.fence").mkdir()
    with pytest.raises(RunError) as caught:
        Exclusive(tmp_path).run(fencing_token)
    assert (0,) == caught.value.attempts
    assert isinstance(caught.value.exceptions[0], CoordinationError)
