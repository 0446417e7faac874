"""CPU time of processes, read from /proc (Linux): the one place the benches read it.

A server as a process tree (`tree_seconds`): gunicorn's master and its workers,
PostgreSQL's main process and its backends, with the children each has reaped.
"""

import os
import sys
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
# /proc/PID/stat, counted from after the command's closing parenthesis: utime and stime
# (the process's own), then cutime and cstime (its reaped children's).
OWN, REAPED = slice(11, 13), slice(13, 15)


def stat(pid: int | str) -> list[str]:
    """/proc/PID/stat's fields after the command's closing parenthesis (state, parent, …)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def ticks(pid: int | str, fields: slice = OWN) -> int:
    return sum(int(value) for value in stat(pid)[fields])


def parent_of(pid: int) -> int:
    return int(stat(pid)[1])


def tree_seconds(pid: int) -> float:
    """CPU time (user and system) a server has spent so far: the process, its live children
    (gunicorn's workers, PostgreSQL's backends) and the children it has reaped (workers
    recycled after max_requests, whose start-up the load paid for; backends that ended)."""
    for _ in range(10):
        # A worker reaped between the reads would count twice or not at all: read the
        # master's reaped children's time before and after its live ones, and again if
        # it changed meanwhile.
        before = ticks(pid, REAPED)
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            live = sum(ticks(child) for child in children)
        except OSError:  # a child gone between the list and its stat: read again
            continue
        if ticks(pid, REAPED) == before:
            return (ticks(pid) + before + live) / TICK
    sys.exit(f"the CPU time of process {pid} kept changing under its reads")


def connections_by_worker(master: int, port: int) -> list[int]:
    """How the established connections to `port` are spread over the children of `master`
    (gunicorn's workers), most first; empty for a server without children (PocketBase).
    Each connection is the socket a worker holds open (its inode in /proc/net/tcp)."""
    established = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rpartition(":")[2], 16)
            if local_port == port and fields[3] == "01":  # 01: ESTABLISHED
                established.add(fields[9])
    spread = []
    for child in Path(f"/proc/{master}/task/{master}/children").read_text().split():
        try:
            descriptors = list(Path(f"/proc/{child}/fd").iterdir())
        except OSError:  # the worker exited meanwhile (recycled): it holds none
            continue
        held = 0
        for descriptor in descriptors:
            try:
                target = os.readlink(descriptor)
            except OSError:  # closed meanwhile
                continue
            held += target.startswith("socket:[") and target[8:-1] in established
        spread.append(held)
    return sorted(spread, reverse=True)
