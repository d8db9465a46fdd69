"""The compiled core (hatch_build.py): what a wheel ships, and that scripts/test's second run is on it."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
sys.path.insert(0, str(ROOT))
import hatch_build  # noqa: E402

CORE = [
    m.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    for m in hatch_build.core_modules(ROOT / "src/oaishim")
]


def test_the_core_is_its_packages_but_the_left_out_and_the_named_hot_modules() -> None:
    listed = set(hatch_build.core_modules(ROOT / "src/oaishim"))
    assert {"wire", "transform", "check"} <= set(hatch_build.PACKAGES)
    on_disk = {f"oaishim/{p.relative_to(ROOT / 'src/oaishim').as_posix()}" for d in hatch_build.PACKAGES
               for p in (ROOT / "src/oaishim" / d).rglob("*.py")}  # fmt: skip
    left_out = {f"oaishim/{relative}" for relative in hatch_build.LEFT_OUT}
    assert left_out <= on_disk  # each one left out is a module that exists
    hot = {f"oaishim/{relative}" for relative in hatch_build.HOT}
    assert listed == (on_disk - left_out) | hot
    assert all((ROOT / "src" / module).is_file() for module in hot)


def _bases(tree: ast.Module, module: str) -> Iterator[tuple[str, str, str]]:
    """(class, base, the module the base comes from) for each class in ``tree`` with a named base."""
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported |= {alias.asname or alias.name: node.module for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.asname or alias.name: alias.name for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name):
                    yield node.name, base.id, imported.get(base.id, module)
                elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
                    yield node.name, base.attr, imported.get(base.value.id, base.value.id)


def _open_to_python(tree: ast.Module) -> set[str]:
    """The classes of a module marked ``@mypyc_attr(allow_interpreted_subclasses=True)``."""
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for deco in node.decorator_list
        if isinstance(deco, ast.Call)
        and isinstance(deco.func, ast.Name)
        and deco.func.id == "mypyc_attr"
        and any(
            k.arg == "allow_interpreted_subclasses" and getattr(k.value, "value", None) is True for k in deco.keywords
        )
    }


def test_no_python_class_inherits_from_a_compiled_one() -> None:
    """mypyc's classes refuse Python subclasses (a TypeError at import or when the class is built):
    a class outside the compiled modules, in the package or the tests, must not inherit from one
    inside, unless that one is marked open to them. (Found by the compiled run too, but only where a
    test reaches the class.)"""
    compiled = set(CORE)
    files = hatch_build.core_modules(ROOT / "src/oaishim")  # CORE's modules' files, in its order
    opened = {
        module: _open_to_python(ast.parse((ROOT / "src" / f).read_text()))
        for module, f in zip(CORE, files, strict=True)
    }
    assert "ResponseWrapper" in opened["oaishim.server.seam"]  # the one the Python wrappers extend
    offenders = []
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        relative = path.relative_to(ROOT / "src") if path.is_relative_to(ROOT / "src") else path.relative_to(ROOT)
        module = relative.with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
        if module in compiled:
            continue
        for name, base, source in _bases(ast.parse(path.read_text()), module):
            if source in compiled and base not in opened.get(source, set()):
                offenders.append(f"{module}.{name}({source}.{base})")
    assert not offenders


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
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], check=True, timeout=600
    )
    script = (
        "import sys\n"
        "import oaishim.transform.request as r, oaishim.transform.validate as v\n"
        "from oaishim.profiles import get_profile\n"
        "assert r.__file__.endswith(sys.argv[1]), r.__file__\n"
        "body = {'model': 'm', 'messages': [{'role': 'developer', 'content': 'Be brief.'}], 'n': 2.0, 'max_tokens': 1e3}\n"
        "v.validate('chat', body)\n"
        "p = r.prepare('chat', body, get_profile('generic'))\n"
        "print(p.n, p.max_tokens, p.body['messages'][0]['role'])\n"
    )
    done = subprocess.run(
        [python, "-c", script, SUFFIX], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "1000.0", "system"]


@pytest.mark.live
def test_oaishim_pure_gives_the_pure_wheel(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, OAISHIM_PURE="1")
    assert wheel.name.endswith("-py3-none-any.whl")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(SUFFIX)]


def _compiled_trees() -> Iterator[tuple[str, ast.Module]]:
    """Each compiled module (its path under src/) and its parsed source."""
    for module in hatch_build.core_modules(ROOT / "src/oaishim"):
        yield module, ast.parse((ROOT / "src" / module).read_text())


def test_a_compiled_function_binds_each_exception_name_to_one_type() -> None:
    """mypyc gives a name one type per function: ``except Broken as exc`` then ``except TimeoutError
    as exc`` raised a TypeError from the second handler in the compiled build (the first-byte
    timeout answered 500), while Python and mypy accept it. Found by the compiled run only where a
    test reaches the handler; this reads every compiled module."""
    mixed = []
    for module, tree in _compiled_trees():
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                types: dict[str, set[str]] = {}
                for node in ast.walk(function):
                    if isinstance(node, ast.ExceptHandler) and node.name:
                        types.setdefault(node.name, set()).add(ast.unparse(node.type) if node.type else "BaseException")
                mixed += [f"{module}:{function.name}: {name} {sorted(t)}" for name, t in types.items() if len(t) > 1]
    assert not mixed


def _awaits(nodes: list[ast.stmt]) -> bool:
    return any(isinstance(x, ast.Await | ast.AsyncWith | ast.AsyncFor) for node in nodes for x in ast.walk(node))


def test_no_compiled_coroutine_awaits_in_a_finally() -> None:
    """mypyc 2.4: an exception caught in a compiled coroutine awaited by another compiled one, when
    it came from an awaitable that is not compiled (the event loop's ``create_connection``), stays
    the thread's current exception after its ``except`` block; a compiled ``try`` whose ``finally``
    holds an ``await`` then raises it again after a body that ended normally (with the request's
    coroutines compiled, an unreachable backend's answered 502 was followed by the
    ConnectionRefusedError escaping the app). ``bench/mypyc_bugs.py`` shows it; this reads every
    compiled module for the construct."""
    found = []
    for module, tree in _compiled_trees():
        for function in ast.walk(tree):
            if isinstance(function, ast.AsyncFunctionDef):
                found += [
                    f"{module}:{function.name}:{node.lineno}"
                    for node in ast.walk(function)
                    if isinstance(node, ast.Try) and _awaits(node.finalbody)
                ]
    assert not found


def test_no_compiled_class_defines_call_over_a_base_without_it() -> None:
    """mypyc 2.4: calling an instance of a compiled class whose ``__call__`` its compiled base
    class lacks ends the interpreter (SIGSEGV; ``bench/mypyc_bugs.py``). Why ``server.app.Gateway``
    holds its ``Dispatch`` instead of inheriting it."""
    found = []
    for module, tree in _compiled_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.bases:
                calls = any(
                    isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == "__call__" for f in node.body
                )
                bases = [
                    ast.unparse(b) for b in node.bases if ast.unparse(b) not in ("object", "Exception", "Protocol")
                ]
                if calls and bases:
                    found.append(f"{module}:{node.name}({', '.join(bases)})")
    assert not found


# Module constants a test replaces (monkeypatch sets the module's attribute, which a compiled read of
# a Final name, a C static, would not see): they stay plain globals.
PATCHED_CONSTANTS = {"transform/fastchunk.py": {"_VLLM_TOKEN"}, "check/_schema.py": {"_MAX_PLANS"}}


def test_a_compiled_modules_constants_read_by_its_functions_are_final() -> None:
    """Compiled, a module global is a lookup in the module's dict at every read (88 a plain chat
    request, 11k instructions, before they were made Final); a ``Final`` one is a C static. Every
    constant (an upper-case name, or ``log``) bound once at module level and read inside a
    function is annotated ``Final``, but those a test replaces."""
    plain = []
    for module, tree in _compiled_trees():
        read = {
            node.id
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            for node in ast.walk(function)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
        }
        rebound = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
        bound: dict[str, list[ast.stmt]] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                bound.setdefault(node.targets[0].id, []).append(node)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                bound.setdefault(node.target.id, []).append(node)
        skip = PATCHED_CONSTANTS.get(module.removeprefix("oaishim/"), set())
        for name, nodes in bound.items():
            if len(nodes) != 1 or name in rebound or name in skip or name not in read:
                continue
            if not (name == "log" or (name.lstrip("_")[:1].isupper() and name.upper() == name)):
                continue
            node = nodes[0]
            if isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation).startswith(("Final", "TypeAlias")):
                continue
            plain.append(f"{module}:{node.lineno} {name}")
    assert not plain
