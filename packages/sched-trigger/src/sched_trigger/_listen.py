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

__all__ = ["DEFAULT_BACKLOG", "LOCK_SUFFIX", "listen", "unlink_if_ours"]

#: The accept backlog: room for hundreds of simultaneous connects (the kernel
#: caps it at ``net.core.somaxconn``).
DEFAULT_BACKLOG = 4096
#: The owner lock beside the socket: ``<socket path>.lock``.
LOCK_SUFFIX = ".lock"
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

    Args:
        path: where the socket lives (at most 107 bytes on Linux, 103 on macOS).
        backlog: the accept backlog.

    Returns:
        The listening socket, ready for `Server.serve`; closing it releases the lock.

    Raises:
        AlreadyServing: another daemon owns *path* (holds its lock, or answers on it).
        NotASocket: *path* exists and is not a socket.
        OSError: the path is too long (``ENAMETOOLONG``), or creating the lock
            file, binding or restricting the socket failed.
    """
    path = os.fspath(path)
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
        os.chmod(path, 0o600)  # noqa: PTH101
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
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
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
        raise NotASocket(errno.EEXIST, "exists and is not a socket; left alone", path)
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
