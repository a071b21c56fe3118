"""What happens to a shell command's children when the job runner is PID 1.

In a container the job runner is often PID 1, and PID 1 inherits every
orphan. ``sh -c 'sleep 2 &'``'s ``sleep`` is one: once ``sh`` exits it is
re-parented to PID 1, and when it exits it stays a zombie, because Python
reaps only the children it started. With ``kill_group=True`` the run sweeps
the shell's group and reaps what it stopped; a process that left the group
needs an init that reaps (``docker run --init``). The test runs a Python
child as PID 1 of a new PID namespace (``unshare``, as root: CI runs as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from sched_cmd_testkit import DEADLINE

PID1 = textwrap.dedent(
    """
    import os, time
    from pathlib import Path
    import sched_cmd

    assert 1 == os.getpid()

    def state(pid):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return "gone"
        fields = stat[stat.rindex(")") + 2 :].split()
        return f"state {fields[0]} parent {fields[1]}"

    def after_exit(pid):
        deadline = time.monotonic() + 30
        while state(pid).startswith(("state S", "state R")) and time.monotonic() < deadline:
            time.sleep(0.01)  # sleep-ok: waits for the orphan's own exit, bounded
        return state(pid)

    # The shell leaves a sleep behind and exits at once.
    script = "sleep 0.2 >/dev/null 2>&1 & echo $!"
    for kill_group in (False, True):
        result = sched_cmd.run(["sh", "-c", script], capture_output=True, kill_group=kill_group)
        print(f"kill_group={kill_group}: {after_exit(int(result.stdout))}", flush=True)
    """
)


@pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0,
    reason="needs unshare(1) and root for a PID namespace",
)
def test_a_shells_orphan_is_a_zombie_of_pid_1_unless_kill_group_sweeps_it() -> None:
    """Without kill_group the shell's orphan ends as a zombie of PID 1 (the job runner);
    with it, the run stops it with the group and reaps it."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", PID1],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no PID namespace here: {done.stderr.strip()}")
    assert ("kill_group=False: state Z parent 1\nkill_group=True: gone\n", 0) == (
        done.stdout,
        done.returncode,
    )
    # The sweep says what it did (the sched_cmd logger's warning, on stderr here).
    assert "exited but its process group still has members; sent them SIGTERM" in done.stderr
