"""``oaishim inspect`` as text for a terminal: the list of exchanges, and one exchange in full —
its request in a few lines, the stream as a timeline (offset, delta), the final message a client
holds, and the checker's findings for both sides. Pure: records in, strings out."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from oaishim.capture.build import findings_now
from oaishim.capture.record import Record, body_bytes, path_of, request_json, side
from oaishim.capture.timeline import describe, final_message, is_stream, timed_events


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0f} ms"


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) + f".{int(stamp * 1000) % 1000:03d}"


def render_list(rows: Sequence[Mapping[str, Any]], *, torn: int = 0, dropped: int = 0) -> str:
    lines = [f"{'ID':<16}  {'TIME':<23}  {'MODEL':<14}  {'REQUEST':<32}  {'STATUS':>6}  {'TOTAL':>9}  FINDINGS"]
    for row in rows:
        request = f"{row['method']} {row['path']}" + (" stream" if row.get("stream") else "")
        findings = "unchecked" if row.get("findings") is None else f"{row['findings']}"
        if row.get("upstream_findings"):
            findings += f" (upstream {row['upstream_findings']})"
        if row.get("checked_now"):
            findings += ", checked now"
        lines.append(
            f"{row['id']:<16}  {_when(float(row['time'] or 0)):<23}  {str(row.get('model') or '-')[:14]:<14}  "
            f"{request[:32]:<32}  {row.get('status') or '-'!s:>6}  {_ms(row.get('duration_ms')):>9}  {findings}"
        )
    tail = f"{len(rows)} exchange(s)"
    if dropped:
        tail += f"; {dropped} dropped while recording (queue full)"
    if torn:
        tail += f"; {torn} unreadable line(s) skipped (a crash tears at most the last)"
    return "\n".join([*lines, tail])


def _request_summary(request: Mapping[str, Any]) -> list[str]:
    body = request_json(request)
    out = [f"{request.get('method')} {request.get('target')}"]
    if body is None:
        size = len(body_bytes(request))
        return [*out, f"  body: {size} byte(s)" if size else "  no body"]
    messages = body.get("messages")
    if isinstance(messages, list):
        roles = [str(m.get("role")) for m in messages if isinstance(m, Mapping)]
        out.append(f"  messages: {len(messages)} ({', '.join(roles)})")
        last = messages[-1] if messages and isinstance(messages[-1], Mapping) else {}
        if isinstance(last.get("content"), str):
            out.append(f"  last: {last['content'][:100]!r}")
    elif "prompt" in body:
        out.append(f"  prompt: {str(body['prompt'])[:100]!r}")
    shown = (
        "model",
        "stream",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "tool_choice",
    )
    params = [f"{k}={orjson.dumps(body[k]).decode()}" for k in shown if k in body]
    if isinstance(body.get("tools"), list):
        params.append(f"tools={len(body['tools'])}")
    others = sorted(set(body) - set(shown) - {"messages", "prompt", "tools"})
    if others:
        params.append("also " + ", ".join(others))
    out.append("  " + " ".join(params))
    return out


def _timeline(response: Mapping[str, Any]) -> list[str]:
    events = timed_events(response)
    out = [f"stream: {len(events)} event(s), {len(response.get('reads') or [])} read(s)"]
    out += [f"  {e.t_ms:>9.1f} ms  {describe(e)}" for e in events]
    return out


def _final(response: Mapping[str, Any], target: str) -> list[str]:
    final = final_message(response, target)
    text = orjson.dumps(final, option=orjson.OPT_INDENT_2).decode() if not isinstance(final, str) else final
    return ["final message:", *("  " + line for line in text.splitlines()[:60])]


def _findings(name: str, findings: Any) -> list[str]:
    if findings is None:
        return [f"findings ({name}): not checked"]
    if not findings:
        return [f"findings ({name}): none"]
    out = [f"findings ({name}): {len(findings)}"]
    for f in findings:
        where = f["path"] if f.get("chunk") is None else f"chunk {f['chunk']} {f['path']}"
        out.append(f"  {f['severity']:<7} {f['rule']:<26} {where}: {f['message']}")
    return out


def _side(shown: Mapping[str, Any], which: str) -> list[str]:
    request = side(shown, "request")
    response = side(shown, "response")
    parts = [f"{which} request:", *("  " + line for line in _request_summary(request))]
    if not response:
        return [*parts, "", f"{which} response: none"]
    parts += ["", f"{which} response: {response.get('status')} at {_ms(response.get('t'))}"]
    if is_stream(response):
        parts += _timeline(response)
    return parts + _final(response, path_of(str(request.get("target", ""))))


def render_exchange(record: Record, which: str = "client") -> str:
    """One exchange; ``which`` side's stream and final message are shown (findings for both)."""
    shown = side(record, which)
    timings = record.get("timings") or {}
    head = [
        f"exchange {record.get('id')}  {_when(float(record.get('time') or 0))}  {record.get('mode')}"
        + (f"  profile {record['profile']}" if record.get("profile") else "")
        + (f"  model {record['model']}" if record.get("model") else ""),
        f"timings: ttfb {_ms(timings.get('ttfb_ms'))}, first token {_ms(timings.get('ttft_ms'))}, "
        f"total {_ms(timings.get('total_ms'))}; upstream ttfb {_ms(timings.get('upstream_ttfb_ms'))}, "
        f"first token {_ms(timings.get('upstream_ttft_ms'))}",
    ]
    if record.get("error"):
        head.append(f"error: {record['error']}")
    if record.get("redacted"):
        head.append("redacted: " + ", ".join(record["redacted"]))
    parts = [*head, ""]
    if not shown:
        parts.append(f"no {which} side: the gateway answered this request itself")
    else:
        parts += _side(shown, which)
    parts.append("")
    if not isinstance(record.get("findings"), Mapping):  # stored unchecked (the writer was over its budget)
        parts.append("(not checked while recording; checked now)")
    findings = findings_now(record)
    parts += _findings("client", findings.get("client"))
    if record.get("upstream"):
        parts += _findings("upstream", findings.get("upstream"))
    return "\n".join(parts)
