"""What the kernel says about a process tree: CPU time (user+sys) and resident memory, from /proc.

A proxy may be several processes (nginx's master and worker) or one with threads (LiteLLM, the
gateway): the whole tree is summed; /proc/PID/stat already sums a process's threads.
"""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses


def tree(root: int) -> list[int]:
    """``root`` and all its descendants that are alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(_stat_fields(int(entry))[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time of these processes (10 ms resolution with a 100 Hz tick)."""
    total = 0
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / TICK


def cpu_split(pids: list[int]) -> tuple[float, float]:
    """User and system CPU time of these processes, apart (seconds, as ``cpu_seconds``)."""
    user = system = 0
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        user, system = user + int(fields[11]), system + int(fields[12])
    return user / TICK, system / TICK


def rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
    return total
