"""What the kernel says about a process tree: CPU time (user+sys) and resident memory, from /proc.

A proxy may be several processes (nginx's master and worker) or one with threads (LiteLLM, the
gateway): the whole tree is summed; a process's figure already sums its threads, live and ended.

CPU time is read from each process's CPU-time clock (``clock_gettime`` on the clock id Linux derives
from the pid), which counts in nanoseconds. /proc/PID/stat counts in clock ticks (10 ms at 100 Hz):
over a run of 12,288 chunks a tick is 0.8 µs a chunk, and each figure is the difference of two
readings, so the stat counts alone put ±1.6 µs of rounding on a per-chunk figure whose goal is 10.
The stat counts remain the fallback (a kernel without process clocks), and give the user/system split.
"""

from __future__ import annotations

import os
import time
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


def _clock_id(pid: int) -> int:
    """The CPU-time clock of process ``pid`` (what clock_getcpuclockid(3) returns: CPUCLOCK_SCHED of
    the whole thread group, encoded as ``~pid << 3 | 2``)."""
    return (~pid << 3) | 2


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time of these processes, to the nanosecond where the kernel has process
    CPU clocks, else in clock ticks (see the module)."""
    total = 0.0
    for pid in pids:
        try:
            total += time.clock_gettime_ns(_clock_id(pid)) / 1e9
            continue
        except OSError:  # gone, or no such clock here: the stat counts say which
            pass
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15 of stat)
    return total


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
