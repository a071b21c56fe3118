"""An owner-only listening unix socket with stale-file hygiene: `listen`."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat

from ._errors import AlreadyServing, NotASocket

__all__ = ["DEFAULT_BACKLOG", "listen"]

#: The accept backlog: room for hundreds of simultaneous connects (the kernel
#: caps it at ``net.core.somaxconn``).
DEFAULT_BACKLOG = 4096
_PROBE_TIMEOUT = 1.0


def listen(path: str | os.PathLike[str], *, backlog: int = DEFAULT_BACKLOG) -> socket.socket:
    """Create the daemon's listening unix socket at *path*, owner-only from the start.

    The socket is bound, restricted to mode 0600, and only then set listening:
    a connect to a bound socket that is not listening yet is refused, so no
    other user can connect while the file still has the umask's mode, and the
    process-wide umask (which other threads may rely on) is never touched.

    A socket file left by a dead daemon (nobody answers on it) is removed
    first. One that a live daemon still answers on is not (`AlreadyServing`);
    anything that is not a socket is left alone (`NotASocket`). The socket is
    closed, and a file it created removed, on any failure. `Server` removes the
    file again when it closes.

    Args:
        path: where the socket lives (about 100 bytes at most).
        backlog: the accept backlog.

    Returns:
        The listening socket, ready for `Server.serve`.

    Raises:
        AlreadyServing: a live daemon answers on *path*.
        NotASocket: *path* exists and is not a socket.
        OSError: binding or restricting the socket failed.
    """
    path = os.fspath(path)
    _clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = False
    try:
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
        sock.close()
        raise
    return sock


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
        pass  # nobody listens: a dead daemon's file
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
