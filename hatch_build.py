"""The compiled core: ``wire/``, ``transform/`` and the server's hot modules built with mypyc into
the wheel, and a pure fallback.

The gateway spends about a third of a plain request and most of a streamed chunk in the pure core
(bytes to events, the rewrites), and much of the rest in a few server modules (the upstream client,
the exchange's records); all are mypy-strict already. mypyc turns them into C extensions that run
the same code with the type checks it implies (bench/README.md has the counts).
This file is three things:

* hatchling's build hook (``[tool.hatch.build.targets.wheel.hooks.custom]`` in pyproject.toml): a
  wheel build (``pip install .``, ``python -m build``) compiles the core and ships the extensions
  beside the ``.py`` files, which stay as the source of tracebacks. Python imports an extension
  ahead of a ``.py`` of the same name. When the compiler or mypyc fails, or ``OAISHIM_PURE=1`` is
  set, the wheel is the pure one and says so on stderr: the package installs anywhere.
  An editable install (``pip install -e``, what ``scripts/run`` and ``scripts/test`` use) is never
  compiled, so an edited ``.py`` is what runs;
* :func:`compile_core`, for ``scripts/test`` (the fast suite again on the compiled core, so both
  builds are held to the same tests) and ``bench/run`` (which measures the compiled core, as a
  wheel would install it);
* ``python hatch_build.py [--out DIR]``: build a compiled copy of ``src/`` (cached by content under
  ``build/compiled-core/``) and print the folder to put on ``PYTHONPATH``.

What compiled code holds to that pure Python does not: a value must match its annotation at run
time (an ``int`` where ``float`` is declared becomes a float, so JSON numbers are ``int | float``),
and a module's functions call each other directly (a test that swaps one with ``monkeypatch``
cannot reach those calls: such tests are marked ``patches_internals`` and run on the pure build).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
# Under src/oaishim: the pure core, whole, and the checker (the capture process checks each record:
# a streamed chunk's record 268k -> 177k instructions compiled, a plain one 542-566k -> 467-536k)
PACKAGES = ("wire", "transform", "check")
# Left as Python: an exception that is a frozen dataclass (mypyc cannot make it a native class),
# and the spec bundle's generator (run offline, by hand).
LEFT_OUT = ("wire/errors.py", "check/specgen.py")
# And the modules outside it that every request runs through and that no Python class inherits
# from: the HTTP server's connection and request cycle (server.http, server.h1cycle: -42k a plain
# request against them as Python), the upstream client and its pool, the exchange's records, the
# ASGI helpers, metrics, the access log, the key check and the masking of secrets (-90k
# instructions a plain request, on top of the core's -130k), and the stream's direct path
# (server.direct: -2.7k a chunk), a capture's recorder (server.recorder: its wrappers of every
# message and chunk); and the record's build in the capture writer (capture.build, record,
# timeline, index: a plain record without the checker 53 -> 38 us; capture.store's `_thread`
# attribute is a C keyword to mypyc 2.4's output, so it stays Python); and the request's coroutines
# (app, dispatch, relay: -31k instructions a plain request), the Responses endpoints (server.responses:
# -74k a plain Responses request), and the seam (server.seam: its wrappers'
# bases, which Python classes extend too, are marked ``mypyc_attr(allow_interpreted_subclasses=True)``,
# and the recorder's compiled wrappers extend them). mypyc 2.4.1 leaves an exception caught
# in a compiled coroutine, that came from the loop's own awaitable, as the thread's current
# exception (as it did with upstream.py compiled alone): no compiled ``finally`` may await, or it
# raises that exception again (bench/mypyc_bugs.py; the guard tests in
# tests/packaging/test_compiled_core.py).
HOT = (
    *(f"capture/{name}.py" for name in ("build", "index", "raw", "record", "redact", "timeline")),
    *(
        f"server/{name}.py"
        for name in (
            "access",
            "app",
            "asgi",
            "auth",
            "capture_feed",
            "capture_frame",
            "direct",
            "dispatch",
            "exchange",
            "h1client",
            "h1cycle",
            "http",
            "idle_poll",
            "metrics",
            "outbox",
            "recorder",
            "recorder_upstream",
            "relay",
            "responses",
            "seam",
            "upstream",
        )
    ),
)
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def core_modules(package: Path) -> list[str]:
    """The core's modules under ``package`` (a folder named ``oaishim``), as paths relative to its parent."""
    out = []
    for name in PACKAGES:
        for path in sorted((package / name).rglob("*.py")):
            relative = path.relative_to(package).as_posix()
            if relative not in LEFT_OUT:
                out.append(f"oaishim/{relative}")
    return out + [f"oaishim/{relative}" for relative in HOT]


def fingerprint(package: Path) -> str:
    """A hash of what the compiled core is made from: its modules, this file and the compiler's version."""
    import mypy.version

    digest = hashlib.sha256(f"{mypy.version.__version__} {sys.version} {SUFFIX}".encode())
    digest.update(Path(__file__).read_bytes())
    for relative in core_modules(package):
        digest.update(relative.encode() + b"\0" + (package.parent / relative).read_bytes())
    return digest.hexdigest()[:16]


def compile_core(package: Path, out: Path, *, quiet: bool = True) -> list[Path]:
    """Copy ``package`` (a folder named ``oaishim``) into ``out`` and compile its core there.

    Returns the extension files, relative to ``out``: one per module and mypyc's shared library
    (``<hash>__mypyc``, at the top). Raises ``subprocess.CalledProcessError`` when mypyc or the C
    compiler fails."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(package, out / "oaishim", ignore=shutil.ignore_patterns("__pycache__", f"*{SUFFIX}"))
    env = {**os.environ, "MYPYC_OPT_LEVEL": os.environ.get("MYPYC_OPT_LEVEL", "3")}
    # Third-party modules without stubs in a build environment are typed Any, as for mypy --strict's
    # own run they are not (orjson and jsonschema-rs ship their types; the hook installs them).
    argv = [sys.executable, "-m", "mypyc", "--ignore-missing-imports", *core_modules(out / "oaishim")]
    done = subprocess.run(argv, cwd=out, env=env, capture_output=quiet, text=True, check=False)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
    shutil.rmtree(out / "build", ignore_errors=True)
    return sorted(p.relative_to(out) for p in out.rglob(f"*{SUFFIX}"))


def compiled_copy(src: Path, cache: Path) -> Path:
    """A copy of ``src`` (the folder holding ``oaishim``) under ``cache`` with the core compiled:
    compiled once per content of the core; the rest of the package is brought up to date each time."""
    folder = cache / fingerprint(src / "oaishim")
    if not ((folder / "oaishim").is_dir() and (folder / ".complete").exists()):
        shutil.rmtree(folder, ignore_errors=True)
        cache.mkdir(parents=True, exist_ok=True)  # a fresh clone has no build/ yet (bench/run's first compile)
        work = Path(tempfile.mkdtemp(prefix="building-", dir=cache))
        try:
            compile_core(src / "oaishim", work)
            (work / ".complete").write_text("")
            work.rename(folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    _sync(src / "oaishim", folder / "oaishim")
    return folder


def _sync(package: Path, copy: Path) -> None:
    """Make ``copy`` hold ``package``'s files (the extensions aside): changed ones copied, gone ones removed."""
    wanted = {p.relative_to(package) for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    for path in list(copy.rglob("*")):
        relative = path.relative_to(copy)
        if (
            path.is_file()
            and not path.name.endswith(SUFFIX)
            and "__pycache__" not in path.parts
            and relative not in wanted
        ):
            path.unlink()
    for relative in wanted:
        source, target = package / relative, copy / relative
        if not target.exists() or source.read_bytes() != target.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]


class CompiledCore(BuildHookInterface):  # type: ignore[misc,valid-type]
    """Compile the core into a (non-editable) wheel; fall back to the pure wheel if that fails."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable" or os.environ.get("OAISHIM_PURE") == "1":
            return
        work = Path(tempfile.mkdtemp(prefix="oaishim-mypyc-"))
        self._work = work
        try:
            built = compile_core(Path(self.root) / "src" / "oaishim", work)
        except (OSError, subprocess.CalledProcessError) as err:
            tail = getattr(err, "stderr", "") or str(err)
            print(f"oaishim: the compiled core could not be built; this wheel is pure Python\n{tail[-2000:]}",
                  file=sys.stderr)  # fmt: skip
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        for relative in built:
            build_data["force_include"][str(work / relative)] = relative.as_posix()

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Build a compiled copy of src/ and print its folder.")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the folder holding oaishim/")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "compiled-core", help="the cache folder")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        print(compiled_copy(args.src.resolve(), args.out.resolve()))
    except subprocess.CalledProcessError as err:
        sys.stderr.write(f"{err.stdout or ''}{err.stderr or ''}\noaishim: mypyc failed (exit {err.returncode})\n")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
