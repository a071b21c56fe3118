"""What ``python -m sched_exclusive status DIR`` reports, computed without the lock.

Probing the cycle lock, even for an instant, would make a concurrent request
find it busy and queue behind a phantom holder (or skip its tick). So the
running state comes from the kernel's lock table, ``/proc/locks`` (Linux),
matched against the lock file's device and inode; the start time from the
holder line; the pending count from a read of the counter file under a
shared flock of its own (never created, never written).

Nothing here ever blocks: files are opened ``O_NONBLOCK`` (a FIFO in place
of one of them is named for what it is instead of waiting for a writer), and
the counter's flock is asked for without waiting, for a second at most.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
import typing
from datetime import UTC, datetime
from pathlib import Path

from sched_lock import MAX_SLOT_SIZE, is_contention, read_holder

from ._files import join, parse_count
from ._outcome import LOCK_NAME, QUEUE_NAME

__all__ = [
    "Shown",
    "Status",
    "format_rfc3339",
    "format_seconds",
    "lock_holders",
    "read_pending",
    "render_json",
    "render_line",
    "status",
]

_PROC_LOCKS = "/proc/locks"
_flock = fcntl.flock
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
#: How long the counter's flock may stay taken by another process's
#: transaction (normally microseconds) before the status gives up.
_COUNTER_PATIENCE = 1.0


@typing.final
class Status(typing.NamedTuple):
    """A snapshot of one Exclusive directory."""

    dir: str
    #: ``"running"``, ``"idle"``, or ``"unknown"`` where ``/proc/locks`` is missing.
    state: str
    #: When the current (or, if idle, the last) holder took the lock.
    since: datetime | None
    #: Whole seconds the current cycle has been running; ``None`` unless running.
    running_for: int | None
    #: The holder's process ids as the kernel reports them (may be empty).
    holder_pids: tuple[int, ...]
    #: Queued rerun requests.
    pending: int
    #: What a human should know about the files (left out of ``as_json``).
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        """The snapshot as JSON-ready values (RFC 3339 and Go duration strings)."""
        return render_json(self, {"dir": self.dir}, {"holder_pids": list(self.holder_pids)})

    def describe(self) -> str:
        """One line for a human."""
        pids = ", ".join(str(pid) for pid in self.holder_pids)
        return render_line(self, self.dir, f"pid {pids}" if pids else "")


class Shown(typing.Protocol):
    """What both backends' snapshots share, for the one renderer below."""

    @property
    def state(self) -> str: ...
    @property
    def since(self) -> datetime | None: ...
    @property
    def running_for(self) -> int | None: ...
    @property
    def pending(self) -> int: ...


def render_line(snapshot: Shown, label: str, holder: str) -> str:
    """The one line ``status`` prints, for either backend: ``label`` (the directory
    or the job name), the state, since when and for how long, ``holder`` (who holds
    the lock, or held it last; empty when unknown) and the queued requests."""
    pending, since, running_for = snapshot.pending, snapshot.since, snapshot.running_for
    queued = f"{pending} queued request{'' if pending == 1 else 's'}"
    if snapshot.state == "running":
        when = "" if since is None else f" since {format_rfc3339(since)}"
        took = "" if running_for is None else f" (for {format_seconds(running_for)})"
        return f"{label}: running{when}{took}{', ' + holder if holder else ''}; {queued}"
    last = ""
    if since is not None:
        last = f" (last cycle started {format_rfc3339(since)}{' on ' + holder if holder else ''})"
    return f"{label}: {snapshot.state}{last}; {queued}"


def render_json(
    snapshot: Shown, head: dict[str, object], holder: dict[str, object]
) -> dict[str, object]:
    """The object ``status --json`` prints, for either backend: ``head`` (what names
    the job), the shared fields, and ``holder`` (the backend's own holder fields)."""
    running_for = snapshot.running_for
    return {
        **head,
        "state": snapshot.state,
        "since": None if snapshot.since is None else format_rfc3339(snapshot.since),
        "running_for": None if running_for is None else format_seconds(running_for),
        "running_for_seconds": running_for,
        **holder,
        "pending": snapshot.pending,
    }


def format_rfc3339(instant: datetime) -> str:
    """Format an aware datetime as RFC 3339 in UTC with a ``Z``."""
    text = instant.astimezone(UTC).isoformat(timespec="microseconds")
    head, _, fraction = text.removesuffix("+00:00").partition(".")
    fraction = fraction.rstrip("0")
    return f"{head}.{fraction}Z" if fraction else f"{head}Z"


def format_seconds(seconds: int) -> str:
    """Format whole seconds as Go's ``Duration.String`` does (``"1h0m5s"``)."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def lock_holders(path: str, table: str = _PROC_LOCKS) -> tuple[int, ...] | None:
    """Find the exclusive flock(2) holders of ``path`` in the kernel's lock table.

    Args:
        path: the lock file (it must exist).
        table: the lock table to read, ``/proc/locks``.

    Returns:
        The pids of the granted ``FLOCK WRITE`` entries on ``path``'s device
        and inode (empty when nobody holds it; a pid the kernel cannot map
        into this namespace is left out), or ``None`` when the table cannot
        be read (not Linux).

    Raises:
        OSError: ``path`` cannot be stat'ed.
    """
    st = Path(path).stat()
    try:
        content = Path(table).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    device = _lock_table_device(path) or (os.major(st.st_dev), os.minor(st.st_dev))
    want = (*device, st.st_ino)
    pids: list[int] = []
    holders = 0
    for line in content.splitlines():
        # "3: FLOCK  ADVISORY  WRITE 12896 fe:00:2147542 0 EOF"; a blocked
        # waiter reads "3: -> FLOCK ..." and holds nothing.
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        where = fields[5].split(":")
        if len(where) != 3:
            continue
        try:
            found = (int(where[0], 16), int(where[1], 16), int(where[2]))
            pid = int(fields[4])
        except ValueError:
            continue
        if found == want:
            holders += 1
            if pid > 0:
                pids.append(pid)
    if holders and not pids:
        return (0,)
    return tuple(pids)


def _lock_table_device(path: str) -> tuple[int, int] | None:
    """The device number ``/proc/locks`` names ``path``'s file by, or ``None``.

    The lock table prints the file system's own device (its superblock's),
    which ``stat`` does not always report: on btrfs ``st_dev`` is the
    subvolume's. The mount the file lives on (its ``mnt_id``, from the
    descriptor's fdinfo) has the file system's device in ``mountinfo``. The
    file is opened with ``O_PATH``: nothing is read, and no lock is taken.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            fdinfo = Path(f"/proc/self/fdinfo/{fd}").read_text(encoding="ascii")
        finally:
            os.close(fd)
        mount_id = next(
            line.split()[1] for line in fdinfo.splitlines() if line.startswith("mnt_id:")
        )
        mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except (OSError, AttributeError, StopIteration, IndexError):  # not Linux, or no such line
        return None
    for line in mountinfo.splitlines():
        # "46 27 0:40 / /mnt rw,relatime - btrfs /dev/loop0 rw": id, parent, major:minor
        fields = line.split(" ", 3)
        if len(fields) > 2 and fields[0] == mount_id:
            major, _, minor = fields[2].partition(":")
            if major.isdigit() and minor.isdigit():
                return int(major), int(minor)
    return None


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_pending(path: str) -> int:
    """Read a counter file under a shared flock without creating or writing it.

    Returns:
        The count; 0 when the file does not exist yet or holds garbage.

    Raises:
        OSError: the file exists but cannot be read, is not a regular file,
            or another process's transaction held it for a second.
    """
    try:
        fd = os.open(path, _READ_FLAGS)  # O_NONBLOCK: a FIFO must not wait for a writer
    except FileNotFoundError:
        return 0
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket
            raise OSError(
                f"{path} is a socket, not a regular file: Exclusive cannot use it as its counter"
            ) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(
                f"{path} is {_kind(mode)}, not a regular file: "
                "Exclusive cannot use it as its counter"
            )
        _share(fd, path)  # writers hold LOCK_EX for microseconds
        return parse_count(os.pread(fd, MAX_SLOT_SIZE, 0))
    finally:
        os.close(fd)


def _share(fd: int, path: str) -> None:
    """Take a shared flock on ``fd`` without ever blocking for long.

    Contention is what sched-lock's one classifier says it is (``EWOULDBLOCK``,
    ``EAGAIN``, ``EACCES``); any other errno is a failure, raised at once. The
    kernel tells nobody when a flock is released, and a blocking flock would
    wait for ever behind a stopped process, so a busy counter is asked again
    after growing pauses, for a second at most: writers hold it for
    microseconds.
    """
    deadline = time.monotonic() + _COUNTER_PATIENCE
    pause = 0.001
    while True:
        try:
            _flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if not is_contention(exc):
                raise
            if time.monotonic() >= deadline:
                raise OSError(
                    f"{path} stayed locked for a second by a counter transaction "
                    "that does not end (a stopped process?)"
                ) from None
        # sleep-ok: no event says a flock was released; bounded by _COUNTER_PATIENCE
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _lock_note(path: str) -> str | None:
    """Why the holder age reads as unknown, when ``path`` is not a regular file."""
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return f"{path} is {_kind(mode)}, not a regular file: the holder age is unknown"


def status(directory: str, *, table: str = _PROC_LOCKS) -> Status:
    """Take a snapshot of an Exclusive directory without touching its lock.

    Args:
        directory: the directory an :class:`Exclusive` uses.
        table: the kernel lock table (tests point it elsewhere).

    Returns:
        The snapshot.

    Raises:
        NotADirectoryError: ``directory`` is not a directory.
        OSError: the counter file exists but cannot be read or is not a
            regular file. The lock file never fails the snapshot: a holder
            age that cannot be read is unknown (with a note when the file is
            not a regular file).
    """
    where = Path(directory)
    if not where.is_dir():
        where.stat()  # FileNotFoundError or PermissionError, naming it
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", directory)
    lock_path = join(directory, LOCK_NAME)
    pending = read_pending(join(directory, QUEUE_NAME))
    try:
        pids = lock_holders(lock_path, table)
    except FileNotFoundError:
        pids = ()  # never locked here yet
    since = read_holder(lock_path)  # never raises: unknown is None
    note = _lock_note(lock_path)
    notes = () if note is None else (note,)
    if pids is None:
        return Status(directory, "unknown", since, None, (), pending, notes)
    if not pids:
        return Status(directory, "idle", since, None, (), pending, notes)
    running_for = None
    if since is not None:
        running_for = max(int(time.time() - since.timestamp()), 0)
    holders = tuple(p for p in pids if p)
    return Status(directory, "running", since, running_for, holders, pending, notes)
