"""The compiled core (hatch_build.py): what a wheel ships, and that scripts/test's second run is on it."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
sys.path.insert(0, str(ROOT))
import hatch_build  # noqa: E402

CORE = [m.removesuffix(".py").replace("/", ".").removesuffix(".__init__") for m in hatch_build.core_modules(ROOT / "src/oaishim")]


def test_the_core_is_every_module_of_wire_and_transform_but_the_error_class() -> None:
    listed = set(hatch_build.core_modules(ROOT / "src/oaishim"))
    on_disk = {f"oaishim/{p.relative_to(ROOT / 'src/oaishim').as_posix()}" for d in ("wire", "transform")
               for p in (ROOT / "src/oaishim" / d).rglob("*.py")}  # fmt: skip
    assert listed == on_disk - {"oaishim/wire/errors.py"} and "oaishim/transform/request.py" in listed


@pytest.mark.skipif(os.environ.get("OAISHIM_EXPECT_COMPILED") != "1", reason="the pure run (scripts/test runs both)")
def test_this_run_imports_the_compiled_core() -> None:
    """A run meant for the compiled core that imported the .py files would prove nothing."""
    pure = [name for name in CORE if not str(importlib.import_module(name).__file__).endswith(SUFFIX)]
    assert not pure, f"imported as Python: {pure}"
    assert str(importlib.import_module("oaishim.wire.errors").__file__).endswith(".py")


def _wheel(tmp: Path, **env: str) -> Path:
    out = tmp / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w", str(out), str(ROOT)],
        check=True, env={**os.environ, **env}, timeout=900,
    )  # fmt: skip
    (wheel,) = out.glob("oaishim-*.whl")
    return wheel


@pytest.mark.live
def test_a_wheel_ships_the_compiled_core_and_it_runs(tmp_path: Path) -> None:
    """``pip wheel .`` compiles the core (in pip's own build environment, as a user's install would),
    the wheel is tagged for this platform, and installed in a fresh venv the gateway's request
    rewrite runs from the extensions."""
    wheel = _wheel(tmp_path)
    assert not wheel.name.endswith("-py3-none-any.whl"), wheel.name
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in hatch_build.core_modules(ROOT / "src/oaishim"):
        stem = module.removesuffix(".py")
        assert f"{stem}{SUFFIX}" in names and module in names, module  # the extension, and its source beside it
    assert any(n.endswith(f"__mypyc{SUFFIX}") and "/" not in n for n in names)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin/python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], check=True, timeout=600)
    script = (
        "import oaishim.transform.request as r, oaishim.transform.validate as v\n"
        "from oaishim.profiles import get_profile\n"
        "assert r.__file__.endswith(%r), r.__file__\n"
        "body = {'model': 'm', 'messages': [{'role': 'developer', 'content': 'Be brief.'}], 'n': 2.0, 'max_tokens': 1e3}\n"
        "v.validate('chat', body)\n"
        "p = r.prepare('chat', body, get_profile('generic'))\n"
        "print(p.n, p.max_tokens, p.body['messages'][0]['role'])\n"
    ) % SUFFIX
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "1000.0", "system"]


@pytest.mark.live
def test_oaishim_pure_gives_the_pure_wheel(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, OAISHIM_PURE="1")
    assert wheel.name.endswith("-py3-none-any.whl")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(SUFFIX)]
