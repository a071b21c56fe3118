"""An owner-only listening unix socket, one owner per path: `listen`."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
from typing import final

from ._client import path_too_long
from ._errors import AlreadyServing, NotASocket

__all__ = ["DEFAULT_BACKLOG", "LOCK_SUFFIX", "NOT_A_SOCKET", "listen", "unlink_if_ours"]

#: The accept backlog: room for hundreds of simultaneous connects (the kernel
#: caps it at ``net.core.somaxconn``).
DEFAULT_BACKLOG = 4096
#: The owner lock beside the socket: ``<socket path>.lock``.
LOCK_SUFFIX = ".lock"
#: What `NotASocket` says (the client says the same of a path that is not a socket).
NOT_A_SOCKET = "exists and is not a socket"
_NO_DIRECTORY = "the socket's directory does not exist"
_PROBE_TIMEOUT = 1.0
_CONTENDED = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)


@final
class _OwnedSocket(socket.socket):
    """The listening socket, holding the path's owner lock until it is closed."""

    __slots__ = ("_lock_fd",)

    def __init__(self, *args: object, **kwargs: object) -> None:
        self._lock_fd = -1
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        try:
            super().close()
        finally:
            fd, self._lock_fd = self._lock_fd, -1
            if fd >= 0:
                os.close(fd)  # closing the last descriptor releases the flock


def listen(path: str | os.PathLike[str], *, backlog: int = DEFAULT_BACKLOG) -> socket.socket:
    """Create the daemon's listening unix socket at *path*, owner-only from the start.

    Exactly one daemon owns a path, even when several start at the same
    instant: `listen` first takes an exclusive ``flock`` on the sibling file
    ``<path>.lock`` (created 0600, never removed) and holds it until the socket
    is closed, or the process ends. A daemon that finds it held gets
    `AlreadyServing` at once.

    Only the owner then looks at the path: a socket file left by a dead daemon
    (nobody answers on it) is removed; one that a live daemon answers on (a Go
    daemon, which takes no lock) is `AlreadyServing`; anything that is not a
    socket is left alone (`NotASocket`). The socket is bound, restricted to
    mode 0600, and only then set listening: a connect to a bound socket that is
    not listening yet is refused, so no other user can connect while the file
    still has the umask's mode, and the process-wide umask is never touched.
    On any failure the socket is closed, a file it created removed, and the
    lock released. `Server` removes the socket file again when it closes.

    The mode is changed through a descriptor of the socket file opened without
    following symlinks (on macOS, ``lchmod``), never through the path: a
    symlink swapped in at the path between bind and chmod (in a directory
    others may write to) is refused, and the file it points to is left alone.

    Args:
        path: where the socket lives (at most 107 bytes on Linux, 103 on macOS).
        backlog: the accept backlog (0 or more).

    Returns:
        The listening socket, ready for `Server.serve`; closing it releases the lock.

    Raises:
        AlreadyServing: another daemon owns *path* (holds its lock, or answers on it).
        NotASocket: *path* exists and is not a socket (``ENOTSOCK``), or was
            replaced by something else before it could be made owner-only.
        FileNotFoundError: the socket's directory does not exist (the error
            names *path*).
        ValueError: *backlog* is negative.
        OSError: the path is too long (``ENAMETOOLONG``), or creating the lock
            file, binding or restricting the socket failed.
    """
    path = os.fspath(path)
    if isinstance(backlog, bool) or not isinstance(backlog, int):
        raise TypeError(f"backlog must be an int, not {type(backlog).__name__}")
    if backlog < 0:
        raise ValueError(f"backlog must be 0 or more, got {backlog}")
    problem = path_too_long(path)
    if problem is not None:
        raise OSError(errno.ENAMETOOLONG, problem, path)
    lock_fd = _take_owner_lock(path)
    sock: _OwnedSocket | None = None
    bound = False
    try:
        _clear_stale(path)
        sock = _OwnedSocket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise AlreadyServing(errno.EADDRINUSE, "already serving", path) from exc
            raise
        bound = True
        # Bound but not listening: every connect is refused until listen() below.
        try:
            _restrict(path)
        except NotASocket:
            bound = False  # what is at the path now is not ours to remove
            raise
        sock.listen(backlog)
    except BaseException:
        if bound:
            _unlink_quietly(path)
        if sock is not None:
            sock.close()
        os.close(lock_fd)
        raise
    sock._lock_fd = lock_fd
    return sock


def _take_owner_lock(path: str) -> int:
    """Open and flock ``<path>.lock``; the descriptor holds the ownership.

    The file is never unlinked: a daemon that removed it while another one
    waited to open it would let a third lock a fresh file of the same name.

    Raises:
        AlreadyServing: another process holds the lock.
    """
    lock_path = path + LOCK_SUFFIX
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except FileNotFoundError:
        # Name the path the user gave, not the lock file beside it.
        raise FileNotFoundError(errno.ENOENT, _NO_DIRECTORY, path) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in _CONTENDED:
            raise AlreadyServing(
                errno.EADDRINUSE, f"already serving (another daemon holds {lock_path})", path
            ) from None
        raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear_stale(path: str) -> None:
    """Remove a dead daemon's socket file at *path*; refuse a live one or a non-socket."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise NotASocket(errno.ENOTSOCK, NOT_A_SOCKET, path)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(_PROBE_TIMEOUT)
        probe.connect(path)
    except ConnectionRefusedError:
        pass  # nobody listens: a dead daemon's file (a starting one would hold the lock)
    except FileNotFoundError:
        return  # gone meanwhile
    except (BlockingIOError, TimeoutError) as exc:
        # Listening, with a full backlog: very much alive.
        raise AlreadyServing(errno.EADDRINUSE, "already serving", path) from exc
    else:
        raise AlreadyServing(errno.EADDRINUSE, "already serving", path)
    finally:
        probe.close()
    _unlink_quietly(path)


def _restrict(path: str) -> None:
    """Make the socket file just bound at *path* mode 0600, through a descriptor.

    The file is opened without following a symlink (``O_PATH | O_NOFOLLOW``)
    and checked to be a socket owned by this process's user; its mode is then
    changed through ``/proc/self/fd``, which names that very inode. Where
    ``O_PATH`` does not exist (macOS), ``lchmod`` never follows a symlink.

    Raises:
        NotASocket: the path no longer holds a socket of ours (it was swapped).
    """
    o_path = getattr(os, "O_PATH", 0)
    if not o_path:  # pragma: no cover - macOS
        info = os.lstat(path)
        _check_ours(path, info)
        os.chmod(path, 0o600, follow_symlinks=False)  # noqa: PTH101
        return
    fd = os.open(path, o_path | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_ours(path, os.fstat(fd))
        os.chmod(f"/proc/self/fd/{fd}", 0o600)  # noqa: PTH101  # the inode fd holds
    finally:
        os.close(fd)


def _check_ours(path: str, info: os.stat_result) -> None:
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
        raise NotASocket(
            errno.ENOTSOCK, "was replaced before it could be made owner-only; left alone", path
        )


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # noqa: PTH108


def unlink_if_ours(path: str, inode: tuple[int, int]) -> None:
    """Remove the socket file at *path* if it is still the one ``(st_dev, st_ino)`` names."""
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISSOCK(info.st_mode) and (info.st_dev, info.st_ino) == inode:
        _unlink_quietly(path)
