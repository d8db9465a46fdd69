"""The paths a request can take to the synthetic upstream, each started as a child process.

* ``direct``: no proxy, the floor every other path is measured against.
* ``nginx``: the Debian package as a byte relay (``proxy_buffering off``), one worker, keep-alive
  to the upstream: what forwarding bytes costs without looking at them.
* ``oaishim``: ``oaishim serve`` with the vLLM profile, normalisation and text repair on (the
  defaults), a client key required.
* ``oaishim_workers``: the same with ``--workers N`` (N = the number of cores, or
  ``OAISHIM_BENCH_WORKERS``; measured once ``oaishim serve`` has the flag).
* ``oaishim_capture``: the same with ``--capture DIR`` (measured once the flag exists).
* ``oaishim_poll``: the same with ``--idle-poll-us N`` (N = ``OAISHIM_BENCH_IDLE_POLL_US``, 200 by
  default): the loop polls that long after a read before it sleeps, CPU traded for latency.
* ``litellm``: the LiteLLM proxy from its own venv, a ``hosted_vllm/`` route, a master key.

The gateway's paths run on this checkout's venv, or on the interpreter ``OAISHIM_BENCH_PYTHON``
names (``bench/run --python``: a venv of another interpreter with this checkout installed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LITELLM_VENV = Path(os.environ.get("OAISHIM_LITELLM_VENV", Path.home() / ".cache/oaishim/litellm-venv"))
KEY = "sk-bench"
NAMES = ("direct", "nginx", "oaishim", "oaishim_workers", "oaishim_capture", "oaishim_poll", "litellm")
WORKERS = int(os.environ.get("OAISHIM_BENCH_WORKERS", os.cpu_count() or 1))  # for oaishim_workers
IDLE_POLL_US = int(os.environ.get("OAISHIM_BENCH_IDLE_POLL_US", "200"))  # for oaishim_poll
# this checkout's gateway, as each path runs it (in the reports' column order); then another copy's
OURS = ("oaishim", "oaishim_workers", "oaishim_capture", "oaishim_poll")
OAISHIM_PATHS = (*OURS, "oaishim_before")


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def gateway_python() -> str:
    """The interpreter the gateway's paths run on (see the module)."""
    return os.environ.get("OAISHIM_BENCH_PYTHON") or str(ROOT / ".venv/bin/python")


def unavailable(name: str, sources: dict[str, Path]) -> str | None:
    """Why this path cannot run here, or None."""
    if name == "nginx" and not shutil.which("nginx", path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", "")):
        return "nginx is not installed (apt-get install nginx)"
    if name == "litellm" and not (LITELLM_VENV / "bin/litellm").exists():
        return f"no LiteLLM venv at {LITELLM_VENV} (bench/run creates it)"
    if name == "oaishim_capture" and not capture_supported(sources.get(name)):
        return "n/a: `oaishim serve` has no --capture flag yet (picked up automatically once it has)"
    if name == "oaishim_workers" and not serve_has("--workers", sources.get(name)):
        return "n/a: `oaishim serve` has no --workers flag yet (picked up automatically once it has)"
    if name == "oaishim_poll" and not serve_has("--idle-poll-us", sources.get(name)):
        return "n/a: `oaishim serve` has no --idle-poll-us flag yet (picked up automatically once it has)"
    return None


def capture_supported(oaishim_src: Path | None = None) -> bool:
    return serve_has("--capture", oaishim_src)


def serve_has(flag: str, oaishim_src: Path | None = None) -> bool:
    env = {**os.environ, "PYTHONPATH": str(oaishim_src)} if oaishim_src is not None else None
    out = subprocess.run(
        [gateway_python(), "-m", "oaishim", "serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    ).stdout
    return flag in out


def source_folder(path: Path) -> Path:
    """The folder holding the ``oaishim`` package: ``path`` itself or its ``src``."""
    for candidate in (path / "src", path):
        if (candidate / "oaishim" / "__init__.py").exists():
            return candidate.resolve()
    raise SystemExit(f"--oaishim-src: no oaishim package in {path} or {path / 'src'}")


def launch(name: str, upstream: str, port: int, tmp: Path, sources: dict[str, Path]) -> Launch:
    """How to start ``name``. ``sources`` maps a path to another copy of oaishim's source (a ``src``
    folder, e.g. from ``git archive``) run on the gateway's interpreter, for before/after comparisons;
    ``oaishim_before`` is ``oaishim`` from such a copy, measured in the same rounds."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if name in OAISHIM_PATHS:
        if name in sources:
            env["PYTHONPATH"] = str(sources[name])  # ahead of the venv's editable install
        argv = [
            gateway_python(), "-m", "oaishim", "serve", "--upstream", upstream, "--profile", "vllm",
            "--served-model-name", "bench", "--api-key", KEY, "--port", str(port), "--log-level", "warning",
        ]  # fmt: skip
        if name == "oaishim_capture":
            argv += ["--capture", str(tmp / "capture")]
        if name == "oaishim_workers":
            argv += ["--workers", str(WORKERS)]
        if name == "oaishim_poll":
            argv += ["--idle-poll-us", str(IDLE_POLL_US)]
        return Launch(argv, env, tmp)
    if name == "nginx":
        conf = tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=upstream.removeprefix("http://"), port=port))
        nginx = shutil.which("nginx", path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", "")) or "nginx"
        return Launch([nginx, "-p", str(tmp), "-c", str(conf), "-e", "stderr"], env, tmp)
    if name == "litellm":
        (tmp / "litellm.yaml").write_text(LITELLM_CONF.format(upstream=upstream, key=KEY))
        env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"}
        argv = [str(LITELLM_VENV / "bin/litellm"), "--config", "litellm.yaml", "--host", "127.0.0.1",
                "--port", str(port)]  # fmt: skip
        return Launch(argv, env, tmp)
    if name == "relay":  # bench/chunk_floor.py's floor, on the gateway's interpreter (not a path of the rounds)
        argv = [gateway_python(), str(ROOT / "bench/chunk_floor.py"), "--serve-relay", str(port), upstream]
        return Launch(argv, env, tmp)
    raise ValueError(name)


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log stderr warn;
worker_rlimit_nofile 8192;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  upstream backend {{ server {upstream}; keepalive 256; }}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""

LITELLM_CONF = """\
model_list:
  - model_name: bench
    litellm_params:
      model: hosted_vllm/Qwen/Qwen3-8B
      api_base: {upstream}/v1
      api_key: none
general_settings:
  master_key: {key}
"""
