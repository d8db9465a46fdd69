"""Threads run to their end with the interpreter switching between them as often as it can, so a
step that two threads could split is split within a short test."""

from __future__ import annotations

import sys
import threading


def run_switching(threads: list[threading.Thread]) -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
