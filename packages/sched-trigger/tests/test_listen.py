"""listen: owner-only from the first moment, stale and live socket rules, no leaks."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sched_trigger_testkit import DEADLINE, open_fds, run_async, socket_dir

from sched_trigger import AlreadyServing, NotASocket, Queue, Server, TriggerError, listen

CONNECT_AS_NOBODY = textwrap.dedent(
    """
    import os, socket, sys
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[1])
    except OSError as exc:
        print(exc.errno)
    else:
        print("connected")
    """
)


def connect_as_nobody(path: str) -> str:
    """Try to connect from a child that dropped root for uid/gid 65534; return what happened."""
    done = subprocess.run(
        [sys.executable, "-u", "-c", CONNECT_AS_NOBODY, path],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    )
    return done.stdout.strip()


def test_socket_is_owner_only_and_umask_untouched() -> None:
    """The socket file is mode 0600 whatever the umask, which listen never changes."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s.sock")
        old = os.umask(0o000)
        try:
            sock = listen(path)
        finally:
            during = os.umask(old)
        try:
            info = Path(path).stat()
            assert stat.S_ISSOCK(info.st_mode)
            assert 0o600 == stat.S_IMODE(info.st_mode)
            assert 0o000 == during
        finally:
            sock.close()


def test_a_bound_socket_refuses_connects_until_it_listens() -> None:
    """What listen relies on: before listen(), a connect is refused, so chmod first is safe."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(path)
            with pytest.raises(ConnectionRefusedError):
                client.connect(path)
        finally:
            client.close()
            server.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop privileges in a child")
def test_another_user_is_refused() -> None:
    """A child that dropped root gets EACCES; the same child connects once the mode allows."""
    with socket_dir() as tmp:
        Path(tmp).chmod(0o755)  # the directory is not what refuses
        path = str(Path(tmp) / "s.sock")
        sock = listen(path)
        try:
            assert str(errno.EACCES) == connect_as_nobody(path)
            Path(path).chmod(0o666)
            assert "connected" == connect_as_nobody(path)
        finally:
            sock.close()


def test_a_stale_socket_is_replaced() -> None:
    """A socket file nobody answers on (a dead daemon's) is removed and listened on anew."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s.sock")
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(path)
        dead.close()
        Path(path).chmod(0o755)  # tell the old file from the new one by its mode
        sock = listen(path)
        try:
            assert 0o600 == stat.S_IMODE(Path(path).stat().st_mode)
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.connect(path)
            probe.close()
        finally:
            sock.close()


def test_a_live_socket_is_left_alone() -> None:
    """A socket a live daemon answers on is an AlreadyServing error and stays in place."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s.sock")
        live = listen(path)
        inode = Path(path).stat().st_ino
        fds = open_fds()
        try:
            with pytest.raises(AlreadyServing, match="already serving") as caught:
                listen(path)
            assert errno.EADDRINUSE == caught.value.errno
            assert path == caught.value.filename
            assert isinstance(caught.value, OSError)
            assert isinstance(caught.value, TriggerError)
            assert inode == Path(path).stat().st_ino
            assert fds == open_fds()
        finally:
            live.close()


@pytest.mark.parametrize("kind", ["file", "directory", "symlink"])
def test_anything_not_a_socket_is_left_alone_and_reported(kind: str) -> None:
    """A regular file, directory or symlink at the path is NotASocket and untouched."""
    with socket_dir() as tmp:
        path = Path(tmp) / "s.sock"
        if kind == "file":
            path.write_text("precious")
        elif kind == "directory":
            path.mkdir()
        else:
            path.symlink_to(Path(tmp) / "elsewhere")
        with pytest.raises(NotASocket) as caught:
            listen(path)
        assert isinstance(caught.value, OSError)
        if kind == "file":
            assert "precious" == path.read_text()
        assert path.exists() or path.is_symlink()


def test_failures_close_the_socket() -> None:
    """A bind that fails leaks no descriptor."""
    with socket_dir() as tmp:
        fds = open_fds()
        with pytest.raises(FileNotFoundError):
            listen(Path(tmp) / "missing" / "s.sock")
        assert fds == open_fds()


def test_server_close_removes_its_socket_file_only() -> None:
    """Closing the server removes the socket file, unless another daemon's replaced it."""

    async def scenario(tmp: str) -> None:
        path = str(Path(tmp) / "s.sock")
        server: Server[object] = Server(Queue(1))
        serving = asyncio.create_task(server.serve(listen(path)))
        # sleep-ok: one zero-length yield: the server task starts serving
        await asyncio.sleep(0)
        assert Path(path).exists()
        server.close()
        await asyncio.wait_for(serving, DEADLINE)
        await asyncio.wait_for(server.wait(), DEADLINE)
        assert not Path(path).exists()

        other: Server[object] = Server(Queue(1))
        serving = asyncio.create_task(other.serve(listen(path)))
        # sleep-ok: one zero-length yield: the second server task starts serving
        await asyncio.sleep(0)
        Path(path).unlink()
        replacement = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        replacement.bind(path)  # something else took the path over
        try:
            other.close()
            await asyncio.wait_for(serving, DEADLINE)
            assert Path(path).exists()
        finally:
            replacement.close()

    with socket_dir() as tmp:
        run_async(scenario(tmp))


# --- one owner per path ------------------------------------------------------------------

STARTING_DAEMON = textwrap.dedent(
    """
    import fcntl, os, socket, sys
    path = sys.argv[1]
    # A daemon in the middle of listen(): it holds the owner lock and has bound
    # its socket, but is not listening yet (a connect is refused).
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def test_a_daemon_still_starting_up_keeps_its_path() -> None:
    """A socket bound but not yet listening answers 'refused' like a dead daemon's: the owner
    lock tells them apart, so a second daemon gets AlreadyServing and steals nothing."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s.sock")
        with subprocess.Popen(
            [sys.executable, "-u", "-c", STARTING_DAEMON, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            try:
                assert child.stdout is not None
                assert child.stdin is not None
                assert "ready" == child.stdout.readline().strip()
                inode = Path(path).stat().st_ino
                fds = open_fds()
                with pytest.raises(AlreadyServing, match=r"s\.sock\.lock") as caught:
                    listen(path)
                assert (errno.EADDRINUSE, path) == (caught.value.errno, caught.value.filename)
                assert inode == Path(path).stat().st_ino
                assert fds == open_fds()
            finally:
                child.communicate("", timeout=DEADLINE)


def test_the_lock_is_released_on_close_and_at_process_death() -> None:
    """Closing the socket releases the path; so does the owner's death (a stale file then)."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s.sock")
        fds = open_fds()
        listen(path).close()
        assert fds == open_fds()  # the socket and the lock's descriptor
        listen(path).close()
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import os, sched_trigger; sched_trigger.listen({path!r}); os._exit(0)",
            ],
            timeout=DEADLINE,
            check=True,
        )
        assert 0 == done.returncode
        assert Path(path).exists()  # the dead daemon's file
        listen(path).close()
        assert 0o600 == stat.S_IMODE(Path(path + ".lock").stat().st_mode)


RACER = textwrap.dedent(
    """
    import sys
    from sched_trigger import AlreadyServing, listen
    print("ready", flush=True)
    for line in sys.stdin:
        if not line.startswith("go "):
            continue
        try:
            sock = listen(line.split()[1])
        except AlreadyServing:
            print("refused", flush=True)
            continue
        print("owner", flush=True)
        sys.stdin.readline()  # "release": the owner serves until the round ends
        sock.close()
        print("released", flush=True)
    """
)


@pytest.mark.parametrize(
    "rounds", [pytest.param(40, id="40"), pytest.param(1000, id="1000", marks=pytest.mark.slow)]
)
def test_simultaneous_starts_leave_exactly_one_owner(rounds: int) -> None:
    """Six daemons start on one path at the same instant, round after round (each waits on
    its pipe until the parent says go): exactly one owns the path, and it answers there."""
    with socket_dir() as tmp:
        children = [
            subprocess.Popen(
                [sys.executable, "-u", "-c", RACER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        try:
            for child in children:
                assert child.stdout is not None
                assert "ready" == child.stdout.readline().strip()
            for round_ in range(rounds):
                path = str(Path(tmp) / f"r{round_ % 4}.sock")
                for child in children:
                    assert child.stdin is not None
                    child.stdin.write(f"go {path}\n")
                    child.stdin.flush()
                answers = [child.stdout.readline().strip() for child in children]  # type: ignore[union-attr]
                assert 1 == answers.count("owner"), answers
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.connect(path)
                finally:
                    probe.close()
                owner = children[answers.index("owner")]
                assert owner.stdin is not None
                assert owner.stdout is not None
                owner.stdin.write("release\n")
                owner.stdin.flush()
                assert "released" == owner.stdout.readline().strip()
        finally:
            for child in children:
                child.communicate("", timeout=DEADLINE)


def test_a_path_over_the_sun_path_limit_is_named_as_such() -> None:
    """A path longer than a unix socket takes is ENAMETOOLONG saying so (not '[Errno None]')."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / ("x" * (120 - len(tmp))))
        with pytest.raises(OSError, match=r"over the 10[37]-byte limit") as caught:
            listen(path)
        assert errno.ENAMETOOLONG == caught.value.errno
        assert not Path(path + ".lock").exists()


def test_a_symlink_swapped_in_between_bind_and_chmod_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """listen never changes a mode through the path: a symlink swapped in right after
    bind (as in a world-writable directory without the sticky bit) is refused, and the
    file it points to keeps its mode."""
    import sched_trigger._listen as listen_module

    real_bind = socket.socket.bind

    def bind_then_swap(self: socket.socket, address: str) -> None:
        real_bind(self, address)
        os.unlink(address)  # noqa: PTH108  # the other user's move, forced into the window
        os.symlink(victim, address)  # noqa: PTH211

    with socket_dir() as tmp:
        victim = str(Path(tmp) / "victim")
        Path(victim).write_text("someone else's")
        Path(victim).chmod(0o644)
        path = str(Path(tmp) / "s.sock")
        monkeypatch.setattr(listen_module._OwnedSocket, "bind", bind_then_swap)
        fds = open_fds()
        with pytest.raises(NotASocket) as caught:
            listen(path)
        assert errno.ENOTSOCK == caught.value.errno
        assert path == caught.value.filename
        assert 0o644 == stat.S_IMODE(Path(victim).stat().st_mode)
        assert Path(path).is_symlink()  # not ours: left where it was
        assert fds == open_fds()


@pytest.mark.parametrize("backlog", [-1, -5])
def test_a_negative_backlog_is_refused(backlog: int) -> None:
    """listen(backlog < 0) raises ValueError naming the bound, before touching the path."""
    with socket_dir() as tmp:
        path = Path(tmp) / "s.sock"
        with pytest.raises(ValueError, match="backlog"):
            listen(path, backlog=backlog)
        assert not path.exists()
        assert not Path(f"{path}.lock").exists()


def test_a_missing_directory_is_reported_with_the_path_given() -> None:
    """A socket path in a directory that does not exist names that path, not the lock file."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "missing" / "job.sock")
        with pytest.raises(FileNotFoundError) as caught:
            listen(path)
        assert path == caught.value.filename
        assert f"[Errno 2] the socket's directory does not exist: {path!r}" == str(caught.value)


def test_a_path_that_is_not_a_socket_has_the_one_wording() -> None:
    """The server's wording for a non-socket path is the client's: ENOTSOCK, the path given."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "job.sock")
        Path(path).write_text("")
        with pytest.raises(NotASocket) as caught:
            listen(path)
        assert f"[Errno {errno.ENOTSOCK}] exists and is not a socket: {path!r}" == str(caught.value)
