"""A private PostgreSQL cluster for tests: ``initdb`` into a fresh temporary folder, ``postgres`` on a
free 127.0.0.1 port with its unix socket in that folder, stopped and removed afterwards. Nothing of
the machine's own clusters is touched.

initdb refuses to run as root, so as root the cluster runs as the ``postgres`` user that Debian's
package creates (through ``runuser``), in a folder handed to that user. Without the server binaries
(``apt-get install postgresql``; ``.ci/run`` installs it) :func:`find_bindir` returns None.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

USER = "oaishim"  # the cluster's superuser (trust authentication, localhost only)


def find_bindir() -> Path | None:
    """The newest installed server's bin folder (Debian keeps them per major version)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    bindir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="oaishim-pg-")))
    port: int = 0
    started_in: float = 0.0  # seconds initdb + start took

    def _cmd(self, *args: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *args]
        return list(args)

    def _run(self, *args: str) -> None:
        done = subprocess.run(self._cmd(*args), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> Cluster:
        begun = time.monotonic()
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError(
                    "initdb refuses root and there is no 'postgres' user (apt-get install postgresql)"
                ) from None
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        data = self.root / "data"
        self._run(str(self.bindir / "initdb"), "-D", str(data), "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync")
        for _ in range(3):  # the free port may be taken between probing and binding
            self.port = free_port()
            options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c full_page_writes=off"
            try:
                self._run(
                    str(self.bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(self.root / "log"),
                    "-w",
                    "-o",
                    options,
                    "start",
                )
                break
            except RuntimeError:
                continue
        else:
            raise RuntimeError("postgres did not start: " + (self.root / "log").read_text(errors="replace"))
        self.started_in = time.monotonic() - begun
        return self

    def url(self, database: str = "postgres", **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}" + ("?" + query if query else "")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
