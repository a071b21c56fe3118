"""The real servers sched-exclusive's PostgreSQL tests run against, made and torn down here.

* :class:`Cluster`: a throw-away PostgreSQL cluster (``initdb`` into a fresh
  temporary directory, fsync off), listening on a unix socket in that
  directory and, optionally, on one address inside a network namespace.
* :class:`Namespace`: a network namespace joined to this one by a veth pair
  (a /30 of its own); :meth:`Namespace.cut` takes the link down, the way a
  partition would, and :meth:`Namespace.heal` brings it back.
* :func:`start_pgbouncer`: a PgBouncer in front of a server, in a given pool mode.

Every directory, namespace and link carries a random suffix, and each is
removed by whoever made it, whatever happens.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, final

#: A generous bound for a server to start or stop; never the thing under test.
START_DEADLINE = 60.0


def postgres_tool(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, else the newest in Debian's versioned folders."""
    found = shutil.which(name)
    if found:
        return found

    def version(folder: Path) -> tuple[int, ...]:
        text = folder.parent.name
        return tuple(int(p) for p in text.split(".")) if text.replace(".", "").isdigit() else (0,)

    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    return None


def _as_owner() -> list[str]:
    """The prefix that runs a server program as ``postgres`` when we are root (initdb,
    the server and PgBouncer refuse to run as root)."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _own(path: str | Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres")


def _run(command: Sequence[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip() or done.stdout}")


@final
class Namespace:
    """A network namespace, and a veth pair between it and this one."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise PermissionError("network namespaces need root and iproute2")
        suffix = uuid.uuid4().hex[:8]
        self.name = f"sched-r318-{suffix}"
        self.host_link = f"vh{suffix}"  # this side; IFNAMSIZ allows 15 characters
        self.far_link = f"vf{suffix}"
        self.host_address, self.far_address = self._free_pair()
        self._made: list[list[str]] = []
        try:
            self._step(["ip", "netns", "add", self.name], ["ip", "netns", "del", self.name])
            self._step(
                [
                    "ip",
                    "link",
                    "add",
                    self.host_link,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    self.far_link,
                ],
                ["ip", "link", "del", self.host_link],
            )
            _run(["ip", "link", "set", self.far_link, "netns", self.name])
            _run(["ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_link])
            _run(["ip", "link", "set", self.host_link, "up"])
            inside = ["ip", "netns", "exec", self.name]
            _run([*inside, "ip", "addr", "add", f"{self.far_address}/30", "dev", self.far_link])
            _run([*inside, "ip", "link", "set", self.far_link, "up"])
            _run([*inside, "ip", "link", "set", "lo", "up"])
        except BaseException:
            self.remove()
            raise

    def _step(self, command: list[str], undo: list[str]) -> None:
        _run(command)
        self._made.append(undo)

    @staticmethod
    def _free_pair() -> tuple[str, str]:
        """Two addresses of a random 10.x.y.z/30 no interface of this host uses."""
        taken = subprocess.run(
            ["ip", "-o", "addr"], capture_output=True, text=True, check=True
        ).stdout
        rng = random.SystemRandom()
        while True:
            net = ipaddress.ip_network(
                f"10.{rng.randrange(100, 250)}.{rng.randrange(256)}.{rng.randrange(64) * 4}/30"
            )
            host, far = (str(a) for a in net.hosts())
            prefix = ".".join(host.split(".")[:3]) + "."
            if prefix not in taken:
                return host, far

    def exec(self) -> list[str]:
        """The prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """Partition: this side's link goes down (nothing passes either way)."""
        _run(["ip", "link", "set", self.host_link, "down"])

    def heal(self) -> None:
        """The link comes back up."""
        _run(["ip", "link", "set", self.host_link, "up"])

    def remove(self) -> None:
        """Delete what was made (the veth pair goes with either end), once."""
        while self._made:
            undo = self._made.pop()
            subprocess.run(undo, capture_output=True, check=False)


@final
class Cluster:
    """A throw-away PostgreSQL cluster; :meth:`stop` removes it."""

    def __init__(self, *, namespace: Namespace | None = None, port: int = 5439) -> None:
        initdb, self._pg_ctl = postgres_tool("initdb"), postgres_tool("pg_ctl")
        if initdb is None or self._pg_ctl is None:
            raise FileNotFoundError(
                "PostgreSQL's server programs are not installed (no initdb/pg_ctl; "
                "apt install postgresql), and SCHED_TEST_POSTGRES names no server"
            )
        self.dir = tempfile.mkdtemp(prefix="sched-pg-r318-")
        self.port = port
        self.namespace = namespace
        self._started = False
        try:
            _own(self.dir)
            data = f"{self.dir}/data"
            _run([
                *_as_owner(), initdb, "-D", data, "-A", "trust", "-U", "postgres",
                "--no-sync", "-E", "UTF8",
            ])  # fmt: skip
            listen = "" if namespace is None else namespace.far_address
            if namespace is not None:  # initdb trusts loopback only: trust this side too
                with Path(data, "pg_hba.conf").open("a") as hba:
                    hba.write(f"host all all {namespace.host_address}/32 trust\n")
            options = (
                f"-c listen_addresses='{listen}' -p {port} -k {self.dir} -c fsync=off "
                "-c full_page_writes=off -c synchronous_commit=off -c max_connections=200"
            )
            inside = [] if namespace is None else namespace.exec()
            command = [*inside, *_as_owner(), self._pg_ctl, "-D", data, "-l", f"{self.dir}/log"]
            self._started = True
            _run([*command, "-o", options, "-t", str(int(START_DEADLINE)), "-w", "start"])
        except BaseException:
            self.stop()
            raise

    @property
    def dsn(self) -> str:
        """A connection string through the unix socket (this namespace)."""
        return f"host={self.dir} port={self.port} user=postgres dbname=postgres"

    @property
    def far_dsn(self) -> str:
        """A connection string through the namespace's link, over TCP."""
        assert self.namespace is not None
        return (
            f"hostaddr={self.namespace.far_address} port={self.port} user=postgres dbname=postgres"
        )

    def log(self) -> str:
        try:
            return Path(self.dir, "log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server at once (immediate mode) and remove its directory."""
        if self._started and self._pg_ctl is not None:
            self._started = False
            subprocess.run(
                [*_as_owner(), self._pg_ctl, "-D", f"{self.dir}/data", "-m", "immediate", "stop"],
                capture_output=True,
                check=False,
            )
        shutil.rmtree(self.dir, ignore_errors=True)


@final
class PgBouncer:
    """A PgBouncer in front of a server (``stop`` ends it and removes its directory)."""

    def __init__(self, process: subprocess.Popen[bytes], mode: str, dsn: str, workdir: str) -> None:
        self.process = process
        self.mode = mode
        self.dsn = dsn
        self.workdir = workdir

    def stop(self) -> None:
        """End it at once (SIGKILL: its SIGTERM shutdown takes 2 s, its SIGINT one waits for
        every client; a throw-away pooler has nothing to save) and remove its directory."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(START_DEADLINE)
        shutil.rmtree(self.workdir, ignore_errors=True)


def pgbouncer_binary() -> str | None:
    """PgBouncer's program, if installed."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None


def start_pgbouncer(
    dsn: str, mode: str, *, pool_size: int = 20, reset_query: str | None = None
) -> PgBouncer:
    """Start PgBouncer in ``mode`` (at most ``pool_size`` server connections) in front of
    the server ``dsn`` names, whatever its host and port; it listens on a unix socket.

    ``reset_query`` overrides ``server_reset_query`` (PgBouncer's default is
    ``DISCARD ALL``; an empty one leaves a session's state to its next client).
    """
    from psycopg.conninfo import conninfo_to_dict

    binary = pgbouncer_binary()
    if binary is None:
        raise FileNotFoundError("PgBouncer is not installed")
    params = conninfo_to_dict(dsn)
    server = {
        "host": str(params.get("host") or params.get("hostaddr") or "/var/run/postgresql"),
        "port": str(params.get("port") or 5432),
        "dbname": str(params.get("dbname", "postgres")),
        "user": str(params.get("user", "postgres")),
    }
    if params.get("password"):
        server["password"] = str(params["password"])
    workdir = tempfile.mkdtemp(prefix="sched-pgbouncer-r318-")
    port = 6432
    user = server["user"]
    database = " ".join(f"{key}={value}" for key, value in server.items())
    reset = "" if reset_query is None else f"server_reset_query = {reset_query}\n"
    Path(workdir, "users.txt").write_text(f'"{user}" ""\n')
    Path(workdir, "pgbouncer.ini").write_text(
        f"[databases]\n{server['dbname']} = {database}\n"
        f"[pgbouncer]\nlisten_addr =\nlisten_port = {port}\nunix_socket_dir = {workdir}\n"
        f"auth_type = trust\nauth_file = {workdir}/users.txt\npool_mode = {mode}\n"
        f"default_pool_size = {pool_size}\nmax_client_conn = 500\n{reset}"
        f"logfile = {workdir}/log\npidfile = {workdir}/pid\n"
        "log_connections = 0\nlog_disconnections = 0\n"
    )
    for path in (workdir, f"{workdir}/users.txt", f"{workdir}/pgbouncer.ini"):
        _own(path)
    # Its log goes to the file and, unless quiet, to stdout: never to a pipe
    # nobody drains (a full one would stop PgBouncer).
    process = subprocess.Popen(
        [*_as_owner(), binary, "-q", f"{workdir}/pgbouncer.ini"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bouncer = PgBouncer(
        process, mode, f"host={workdir} port={port} user={user} dbname={server['dbname']}", workdir
    )
    deadline = time.monotonic() + START_DEADLINE
    while not _listening(f"{workdir}/.s.PGSQL.{port}"):
        if process.poll() is not None or time.monotonic() > deadline:
            log = Path(workdir, "log").read_text() if Path(workdir, "log").exists() else ""
            bouncer.stop()
            raise RuntimeError(f"PgBouncer did not start: {log[-2000:]}")
        # sleep-ok: waiting for a daemon to listen (bounded by the deadline)
        time.sleep(0.01)
    return bouncer


def _listening(path: str) -> bool:
    """Whether a unix socket accepts connections (its file appears before it listens)."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def start_bouncer(
    dsn: str, mode: str, *, pool_size: int = 20, reset_query: str | None = None
) -> PgBouncer:
    """:func:`start_pgbouncer` for a test: it skips where PgBouncer is missing (fails
    under CI, whose runner installs it)."""
    import pytest

    try:
        return start_pgbouncer(dsn, mode, pool_size=pool_size, reset_query=reset_query)
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (.ci/run installs it)")
        pytest.skip(str(exc))


@contextmanager
def far_cluster() -> Iterator[Cluster]:
    """A cluster in a namespace of its own, reached over a veth link (``far_dsn``) that
    :meth:`Namespace.cut` partitions, and administered through its unix socket (``dsn``),
    which no partition reaches."""
    namespace = Namespace()
    try:
        cluster = Cluster(namespace=namespace)
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        namespace.remove()


def holder_backend(conn: Any, name: str) -> int | None:
    """The server pid holding ``name``'s advisory lock, from ``pg_locks`` (on ``conn``)."""
    from sched_exclusive import advisory_key

    key = advisory_key(name)
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
    ).fetchone()
    return None if row is None else int(row[0])


def local_backend(pid: int) -> bool:
    """Whether ``pid`` is a PostgreSQL process on this machine that we may signal."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    except OSError:
        return False
