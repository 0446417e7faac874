"""CPU time of processes, read from /proc (Linux): the one place the benches read it.

A server's own tree (`tree_seconds`: gunicorn's master and its workers, PostgreSQL's main
process and its backends, and the children each has reaped), and the processes found by
their command line (`matching_seconds`), whose spending between two readings `spent` sums.
"""

import os
import re
import sys
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
# /proc/PID/stat, counted from after the command's closing parenthesis: utime and stime
# (the process's own), then cutime and cstime (its reaped children's).
OWN, REAPED = slice(11, 13), slice(13, 15)


def ticks(pid: int | str, fields: slice = OWN) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(value) for value in stat[fields])


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


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


def matching_seconds(pattern: str) -> dict[int, float]:
    """CPU seconds (user + system) of each process whose command line matches `pattern`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if re.search(pattern, command):
                found[int(entry.name)] = ticks(entry.name) / TICK
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not readable
            continue
    return found


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings of `matching_seconds` by the processes alive
    at the second (one that started meanwhile from nothing; one that ended meanwhile is
    left out)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())
