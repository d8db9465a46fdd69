"""Whether this mypyc still has the two faults that keep the request's coroutines (server/app.py,
dispatch.py, relay.py) out of the compiled core (bench/README.md, "The request's coroutines
compiled").

Each case is compiled on its own in a temporary folder and run in a child process:

* ``call``: calling an instance of a compiled class whose ``__call__`` is defined on it and not on
  its compiled base class ends the interpreter (SIGSEGV);
* ``stale``: an exception caught inside a compiled coroutine that is awaited by another compiled
  coroutine, when it came from an awaitable that is not compiled (asyncio's or uvloop's
  ``create_connection``), stays the thread's "exception being handled" after its ``except``
  block; a later compiled ``try`` whose ``finally`` holds an ``await`` raises it again once its
  body has ended normally.

    python bench/mypyc_bugs.py      # one line a case: "present" or "gone"; exit 1 while any is present
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

CASES = {
    "call": (
        """
        class Base:
            def __init__(self, x: int) -> None:
                self.x = x


        class Sub(Base):
            def __call__(self, a: int) -> int:
                return a + self.x
        """,
        "import case; print(case.Sub(1)(1))",
        "2",
    ),
    "stale": (
        """
        import asyncio


        async def connect() -> object | None:
            try:
                return await asyncio.get_running_loop().create_connection(asyncio.Protocol, "127.0.0.1", 1)
            except OSError:
                return None


        async def handle() -> None:
            try:
                await connect()
            finally:
                if connect is None:
                    await asyncio.sleep(0)


        async def top() -> str:
            try:
                await handle()
            except BaseException as exc:
                return "raised " + type(exc).__name__
            return "ok"
        """,
        "import asyncio, case; print(asyncio.run(case.top()))",
        "ok",
    ),
}


def present(name: str, source: str, run: str, expected: str) -> bool:
    with tempfile.TemporaryDirectory(prefix=f"mypyc-{name}-") as folder:
        (Path(folder) / "case.py").write_text(textwrap.dedent(source))
        subprocess.run([sys.executable, "-m", "mypyc", "case.py"], cwd=folder, capture_output=True, check=True)
        done = subprocess.run([sys.executable, "-c", run], cwd=folder, capture_output=True, text=True, check=False)
        return done.returncode != 0 or done.stdout.strip() != expected


def main() -> int:
    import mypy.version

    found = False
    for name, (source, run, expected) in CASES.items():
        bug = present(name, source, run, expected)
        found = found or bug
        print(f"mypyc {mypy.version.__version__}: {name}: {'present' if bug else 'gone'}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
