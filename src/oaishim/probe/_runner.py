"""The probe's shell: sends the catalogue's requests with aiohttp and hands the answers to the judge.

Per endpoint (a *side*): calibrate first (which steering dialects work, by their effect: see
``_steer``), then run the cases, ``concurrency`` at a time; a case's steps go one after another.
Cases marked ``exclusive`` (those that compare two generations) run afterwards, alone, so no other
request is batched with them. With ``--against`` the second side runs after the first, never at the
same time: the two often share one backend.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson

from oaishim import __version__
from oaishim.check import CheckOptions
from oaishim.probe._cases import Case, fill, unfilled
from oaishim.probe._compare import compare
from oaishim.probe._expect import Context
from oaishim.probe._judge import Sent, judge_case
from oaishim.probe._results import CaseResult, ProbeRun, SideResult
from oaishim.probe._steer import (
    BIAS_CANDIDATES,
    CALIBRATION_TEXT,
    TEXT_DIALECTS,
    TOKENIZE_DIALECTS,
    TOOL_CALL_OPEN,
    Steering,
    steer_body,
    tool_call_recipe,
)
from oaishim.probe._view import StepView, answer_variables, view_of
from oaishim.transform.special import SpecialTokens

__all__ = ["ProbeOptions", "Progress", "Target", "probe", "run_probe"]

Progress = Callable[[str, CaseResult, int, int], None]  # side label, case, done, total
_GENERATION = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
RESPONSES = "/v1/responses"
_SHOWN_LIMIT = 2000
_WEATHER_FUNCTION: dict[str, Any] = {
    "name": "get_weather",
    "description": "Get the weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris"]}},
        "required": ["city"],
    },
}
_WEATHER_TOOL = {"type": "function", "function": _WEATHER_FUNCTION}


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    model: str
    api_key: str | None = None
    label: str = "A"
    title: str = ""  # what reports call it ("gateway, profile llamacpp"); the URL when not given

    @property
    def name(self) -> str:
        """``A (gateway, profile llamacpp)``: how an "ignored" finding names the endpoint."""
        return f"{self.label} ({self.title or self.url})"

    @property
    def base(self) -> str:
        """The server root: a trailing ``/`` and ``/v1`` are dropped (paths carry ``/v1``)."""
        url = self.url.rstrip("/")
        return url.removesuffix("/v1")


@dataclass(frozen=True, slots=True)
class ProbeOptions:
    concurrency: int = 4
    timeout: float = 120.0
    special_tokens: SpecialTokens | None = None
    overflow_words: int = 200_000  # "hello " repeated: beyond the context of most deployments
    steer: str = "auto"  # "auto": calibrate; "none": never steer

    def check_options(self) -> CheckOptions:
        tokens = self.special_tokens or SpecialTokens()
        return CheckOptions(special_tokens=tokens.special, eot_tokens=tokens.end_of_turn)


class _Client:
    def __init__(self, session: aiohttp.ClientSession, target: Target) -> None:
        self.session = session
        self.target = target

    async def send(
        self, method: str, path: str, data: bytes | None
    ) -> tuple[int | None, dict[str, str], bytes | None, float, str | None]:
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.target.api_key:
            headers["Authorization"] = f"Bearer {self.target.api_key}"
        started = time.perf_counter()
        try:
            async with self.session.request(method, self.target.base + path, data=data, headers=headers) as response:
                body = await response.read()
                found = {k.lower(): v for k, v in response.headers.items()}
                return response.status, found, body, time.perf_counter() - started, None
        except (aiohttp.ClientError, TimeoutError) as exc:
            return None, {}, None, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"

    async def post_json(self, path: str, body: Mapping[str, Any]) -> StepView:
        status, headers, raw, _, error = await self.send("POST", path, orjson.dumps(body))
        return view_of(raw, request=body, status=status, headers=headers, transport_error=error, path=path)


async def _calibrate_text(client: _Client) -> str:
    for name, overlay in TEXT_DIALECTS.items():
        if name == "prompt":
            continue
        body = {
            "model": client.target.model,
            "messages": [{"role": "user", "content": "Say something."}],
            "max_tokens": 24,
            "temperature": 0,
            **overlay(CALIBRATION_TEXT),
        }
        view = await client.post_json("/v1/chat/completions", body)
        if view.ok and view.text() == CALIBRATION_TEXT:
            return name
    return "prompt"


async def _tokenize(client: _Client, dialect: str, text: str) -> list[int] | None:
    build, parse = TOKENIZE_DIALECTS[dialect]
    status, _headers, raw, _, _ = await client.send("POST", "/tokenize", orjson.dumps(build(text, client.target.model)))
    if status != 200 or raw is None:
        return None
    try:
        return parse(orjson.loads(raw))
    except orjson.JSONDecodeError:
        return None


async def _calibrate_responses_text(client: _Client) -> str:
    """The text dialect of ``/v1/responses`` (its own: a gateway may refuse what the backend reads)."""
    for name, overlay in TEXT_DIALECTS.items():
        if name == "prompt":
            continue
        body = {"model": client.target.model, "input": "Say something.", "max_output_tokens": 24, "temperature": 0}
        view = await client.post_json(RESPONSES, {**body, **overlay(CALIBRATION_TEXT)})
        if view.ok and view.responses and view.text() == CALIBRATION_TEXT:
            return name
    return "prompt"


async def _calibrate_tools(
    client: _Client, dialect: str | None, *, responses: bool = False
) -> tuple[str, dict[str, Any]]:
    limit = "max_output_tokens" if responses else "max_tokens"
    base: dict[str, Any] = {"model": client.target.model, "tool_choice": "required", "temperature": 0}
    if responses:
        base.update(input="What is the weather in Paris?", tools=[{"type": "function", **_WEATHER_FUNCTION}])
    else:
        base.update(messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[_WEATHER_TOOL])
    tries: list[tuple[str, dict[str, Any]]] = [("plain", {limit: 64})]
    if dialect is not None:
        opener, newline = await _tokenize(client, dialect, TOOL_CALL_OPEN), await _tokenize(client, dialect, "\n")
        if opener and newline and len(opener) == 1 and len(newline) == 1:
            tries.append(("recipe", {limit: 256, **tool_call_recipe(opener[0], newline[0])}))
    found: str | None = None
    for name, overlay in tries:
        view = await client.post_json(RESPONSES if responses else "/v1/chat/completions", {**base, **overlay})
        calls = view.tool_calls() if view.ok else []
        if calls and (calls[0].get("function") or {}).get("name") == "get_weather":
            if name == "recipe":
                # Also kept when "required" alone is enforced: a step that asks for a call under
                # tool_choice "auto" can only be steered by the recipe.
                return found or name, {k: v for k, v in overlay.items() if k != limit}
            found = name
    return found or "unavailable", {}


async def calibrate(client: _Client, options: ProbeOptions, *, responses: bool = False) -> Steering:
    """Find out, by effect, how this endpoint can be made to write a known text or call a tool
    (``responses``: on ``/v1/responses`` too, when the cases run there)."""
    if options.steer == "none":
        return Steering()
    text = await _calibrate_text(client)
    tokenize = None
    for name in TOKENIZE_DIALECTS:
        if await _tokenize(client, name, "hello") is not None:
            tokenize = name
            break
    bias = None
    if tokenize is not None:
        for word in BIAS_CANDIDATES:
            ids = await _tokenize(client, tokenize, word)
            if ids is not None and len(ids) == 1:
                bias = (ids[0], word)
                break
    tool_call, overlay = await _calibrate_tools(client, tokenize)
    if not responses:
        return Steering(text, tokenize, tool_call, overlay, bias)
    responses_text = await _calibrate_responses_text(client)
    responses_tool_call, responses_overlay = await _calibrate_tools(client, tokenize, responses=True)
    if responses_tool_call == "recipe":
        overlay = responses_overlay  # the same recipe: the tokens are the model's
    return Steering(text, tokenize, tool_call, overlay, bias, responses_text, responses_tool_call)


def _abbreviated(value: Any) -> Any:
    """What a report shows of a request: long strings (the overflow prompt) are summarised."""
    if isinstance(value, str) and len(value) > _SHOWN_LIMIT:
        return f"{value[:60]}… ({len(value)} characters)"
    if isinstance(value, Mapping):
        return {k: _abbreviated(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_abbreviated(v) for v in value]
    return value


def is_responses_case(case: Case) -> bool:
    return any(step.path.startswith(RESPONSES) for step in case.steps)


def _variables(target: Target, steering: Steering, options: ProbeOptions) -> dict[str, Any]:
    tokens = options.special_tokens or SpecialTokens()
    variables: dict[str, Any] = {"model": target.model, "overflow_prompt": "hello " * options.overflow_words}
    if tokens.end_of_turn:
        variables["eot"] = sorted(tokens.end_of_turn, key=lambda t: (len(t), t))[-1]
    if steering.bias_token is not None:
        variables["bias_token_id"], variables["bias_token"] = steering.bias_token
    return variables


def _skip_reason(case: Case, variables: Mapping[str, Any]) -> str | None:
    if "eot" in case.needs and "eot" not in variables:
        return "no end-of-turn token known (give --special-tokens)"
    if "bias" in case.needs and "bias_token" not in variables:
        return "no single-token word found through /tokenize to bias"
    return None


async def _run_case(
    client: _Client, case: Case, steering: Steering, variables: Mapping[str, Any], options: ProbeOptions
) -> CaseResult:
    if (reason := _skip_reason(case, variables)) is not None:
        return CaseResult(case.id, case.title, case.refs, skipped=reason)
    sent: list[Sent] = []
    variables = dict(variables)  # this case's own: the ids its steps' answers give
    if is_responses_case(case):
        steering = steering.for_responses()
    for step in case.steps:
        request: dict[str, Any] | None = None
        data: bytes | None = None
        shown: Any = None
        path = str(fill(step.path, variables))
        if step.body is not None:
            request = fill(step.body, variables)
            if path in _GENERATION and "model" not in request:
                request = {"model": client.target.model, **request}
            request = steer_body(request, fill(step.steer, variables), steering)
            data, shown = orjson.dumps(request), _abbreviated(request)
        elif step.raw is not None:
            text = str(fill(step.raw, variables))
            data, shown = text.encode(), text
        if (missing := unfilled(path, request)) is not None:
            why = f"an earlier step gave no {missing}"
            sent.append(Sent(step.name, step.method, path, request, shown, skipped=why))
            continue
        status, headers, raw, seconds, error = await client.send(step.method, path, data)
        sent.append(Sent(step.name, step.method, path, request, shown, status, headers, raw, seconds, error))
        variables.update(answer_variables(step.name, raw, status, headers))
    ctx = Context(
        model=client.target.model,
        exact_text=steering.exact_text,
        tool_calls_forceable=steering.tool_call != "unavailable",
        steered=frozenset(s.name for s in case.steps if "text" in s.steer),
        steered_tools=frozenset(s.name for s in case.steps if s.steer.get("tool_call")),
        variables=variables,
    )
    return judge_case(case, sent, ctx, options.check_options(), client.target.name)


async def _probe_side(
    target: Target, cases: Sequence[Case], options: ProbeOptions, progress: Progress | None
) -> SideResult:
    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=options.timeout)
    # One connection per request: servers close idle keep-alive connections at will (llama.cpp
    # does, and answers an oversized body before reading it), which a reused one reports as a
    # failure of the next request. A probe sends a few dozen requests; the handshakes cost nothing.
    connector = aiohttp.TCPConnector(force_close=True, limit=max(1, options.concurrency) * 2)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        client = _Client(session, target)
        steering = await calibrate(client, options, responses=any(is_responses_case(c) for c in cases))
        variables = _variables(target, steering, options)
        results: dict[str, CaseResult] = {}
        gate = asyncio.Semaphore(max(1, options.concurrency))

        async def one(case: Case) -> None:
            async with gate:
                results[case.id] = await _run_case(client, case, steering, variables, options)
            if progress is not None:
                progress(target.label, results[case.id], len(results), len(cases))

        await asyncio.gather(*(one(c) for c in cases if not c.exclusive))
        for case in cases:
            if case.exclusive:
                await one(case)
    side = SideResult(
        target.label, target.url, target.model, steering, [results[c.id] for c in cases], title=target.title
    )
    side.seconds = time.perf_counter() - started
    return side


async def probe(
    targets: Sequence[Target], cases: Sequence[Case], options: ProbeOptions, progress: Progress | None = None
) -> ProbeRun:
    sides = [await _probe_side(t, cases, options, progress) for t in targets]
    created = datetime.now(UTC).replace(microsecond=0).isoformat()
    comparison = compare(sides[0], sides[1]) if len(sides) > 1 else None
    return ProbeRun(sides, created, comparison, __version__)


def run_probe(
    targets: Sequence[Target],
    cases: Sequence[Case],
    options: ProbeOptions | None = None,
    progress: Progress | None = None,
) -> ProbeRun:
    """Run the probe to the end (its own event loop)."""
    return asyncio.run(probe(targets, cases, options or ProbeOptions(), progress))
