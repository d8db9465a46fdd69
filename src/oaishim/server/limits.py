"""Per-key limits: requests and tokens per minute, as OpenAI's token buckets.

Each virtual key with ``rpm`` or ``tpm`` has a bucket per limit, holding at most the limit and
refilled at limit/60 per second; ``x-ratelimit-reset-*`` is the time until it is full again, as
OpenAI defines it ("until the rate limit resets to its initial state"). A request takes one from
the requests bucket; the tokens bucket is charged the request's usage when it ends (nobody knows
its count before), and a request is refused while that bucket is empty. Over either limit: a 429
in OpenAI's shape (``rate_limit_exceeded``, ``type`` ``requests`` or ``tokens``) with
``x-ratelimit-*`` and ``retry-after``. A request within its limits gets the same headers.

State lives in this process (:class:`LocalBuckets`), or in Redis when replicas share it
(``--limits redis://…``, :class:`RedisBuckets`): one Lua script does the refill, the check and the
take atomically, on Redis's clock, so replicas with skewed clocks agree. When Redis cannot be
reached the gateway warns and counts locally (each replica then admits up to the limit on its own)
and asks Redis again after a pause.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from oaishim.server.asgi import Headers, Send, send_error
from oaishim.server.config import VirtualKey
from oaishim.server.exchange import Exchange
from oaishim.wire.errors import OpenAIError

__all__ = ["Decision", "Limiter", "LocalBuckets", "RedisBuckets", "limiter_for"]

log = logging.getLogger("oaishim.limits")
RETRY_REDIS_AFTER = 5.0  # seconds local counting lasts before Redis is asked again
# KEYS: the requests bucket, the tokens bucket. ARGV: rpm, tpm (0: no such limit), the request's
# take (1 to admit a request, 0 to only charge), tokens to charge. Returns {admitted (1/0), which
# limit refused ("" when none), requests left, tokens left} (numbers as strings: Lua numbers would be
# truncated to integers on the way back).
LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function level(key, cap)
  local v = redis.call('HMGET', key, 'level', 'ts')
  local lv = tonumber(v[1]) or cap
  local ts = tonumber(v[2]) or now
  return math.min(cap, lv + math.max(0, now - ts) * cap / 60)
end
local function store(key, lv)
  redis.call('HSET', key, 'level', tostring(lv), 'ts', tostring(now))
  redis.call('EXPIRE', key, 120)
end
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local take, charge = tonumber(ARGV[3]), tonumber(ARGV[4])
local req = rpm > 0 and level(KEYS[1], rpm) or 0
local tok = tpm > 0 and level(KEYS[2], tpm) or 0
local refused = ''
if take > 0 then
  if rpm > 0 and req < 1 then refused = 'requests'
  elseif tpm > 0 and tok <= 0 then refused = 'tokens' end
end
if refused == '' then
  if take > 0 and rpm > 0 then req = req - 1 end
  if tpm > 0 then tok = tok - charge end
end
if rpm > 0 then store(KEYS[1], req) end
if tpm > 0 then store(KEYS[2], tok) end
return {refused == '' and 1 or 0, refused, tostring(req), tostring(tok)}
"""


@dataclass(frozen=True, slots=True)
class Decision:
    key: VirtualKey
    refused: str  # "", "requests" or "tokens"
    requests_left: float
    tokens_left: float

    def headers(self) -> Headers:
        """OpenAI's ``x-ratelimit-*``: limit, remaining and the time until the bucket is full."""
        out: Headers = []
        for name, cap, left in (
            ("requests", self.key.rpm, self.requests_left),
            ("tokens", self.key.tpm, self.tokens_left),
        ):
            if cap is None:
                continue
            reset = max(0.0, (cap - left) * 60 / cap)
            out += [
                (b"x-ratelimit-limit-" + name.encode(), str(cap).encode()),
                (b"x-ratelimit-remaining-" + name.encode(), str(max(0, math.floor(left))).encode()),
                (b"x-ratelimit-reset-" + name.encode(), _duration(reset).encode()),
            ]
        return out

    def _wait(self) -> tuple[int | None, float]:
        """The refused limit, and the seconds until one request (or any token) is back."""
        if self.refused == "requests":
            cap, short = self.key.rpm, 1 - self.requests_left
        else:
            cap, short = self.key.tpm, -self.tokens_left
        return cap, max(0.001, short * 60 / (cap or 1))

    def error(self) -> OpenAIError:
        cap, wait = self._wait()
        per = "requests per min (RPM)" if self.refused == "requests" else "tokens per min (TPM)"
        message = (
            f"Rate limit reached for key {self.key.label} on {per}: Limit {cap}. Please try again in {_duration(wait)}."
        )
        return OpenAIError(429, message, self.refused, code="rate_limit_exceeded")

    def retry_after(self) -> Headers:
        _cap, wait = self._wait()
        return [
            (b"retry-after", str(max(1, math.ceil(wait))).encode()),
            (b"retry-after-ms", str(math.ceil(wait * 1000)).encode()),
        ]


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``1s``, ``6m0s``, ``120ms``."""
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class LocalBuckets:
    """The buckets in this process's memory (the same arithmetic as the Lua script)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._levels: dict[str, tuple[float, float]] = {}

    def _level(self, name: str, cap: int, now: float) -> float:
        level, ts = self._levels.get(name, (float(cap), now))
        return min(cap, level + max(0.0, now - ts) * cap / 60)

    def run(self, key: VirtualKey, take: int, charge: int) -> Decision:
        now = self._clock()
        rpm, tpm = key.rpm or 0, key.tpm or 0
        req = self._level("r:" + key.label, rpm, now) if rpm else 0.0
        tok = self._level("t:" + key.label, tpm, now) if tpm else 0.0
        refused = ""
        if take and rpm and req < 1:
            refused = "requests"
        elif take and tpm and tok <= 0:
            refused = "tokens"
        if not refused:
            req -= take if rpm else 0
            tok -= charge if tpm else 0
        if rpm:
            self._levels["r:" + key.label] = (req, now)
        if tpm:
            self._levels["t:" + key.label] = (tok, now)
        return Decision(key, refused, req, tok)


class RedisBuckets:
    """The buckets in Redis, shared by every replica that names the same server."""

    def __init__(self, url: str) -> None:
        import redis.asyncio  # only with --limits redis://…: pip install 'oaishim[limits-redis]'

        self.url = url
        self.client: Any = redis.asyncio.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        self.script = self.client.register_script(LUA)

    async def run(self, key: VirtualKey, take: int, charge: int) -> Decision:
        names = [f"oaishim:limits:{key.label}:requests", f"oaishim:limits:{key.label}:tokens"]
        admitted, refused, req, tok = await self.script(keys=names, args=[key.rpm or 0, key.tpm or 0, take, charge])
        refused = refused.decode() if isinstance(refused, bytes) else str(refused)
        return Decision(key, "" if admitted else refused, float(req), float(tok))

    async def close(self) -> None:
        await self.client.aclose()


class Limiter:
    """The limits of every virtual key: in Redis when configured, else (or while Redis is away) here."""

    def __init__(self, redis_url: str | None, local: LocalBuckets | None = None) -> None:
        self.local = local or LocalBuckets()  # the workers' shared buckets under --workers N
        self.shared = RedisBuckets(redis_url) if redis_url else None
        self._local_until = 0.0

    async def _run(self, key: VirtualKey, take: int, charge: int) -> Decision:
        shared = self.shared
        if shared is not None and time.monotonic() >= self._local_until:
            try:
                return await shared.run(key, take, charge)
            except Exception as exc:  # the Redis client's errors (connection, timeout, a script error)
                self._local_until = time.monotonic() + RETRY_REDIS_AFTER
                log.warning(
                    "limits: Redis unreachable (%s); counting in this process for %g s", type(exc).__name__,
                    RETRY_REDIS_AFTER,
                )  # fmt: skip
        return self.local.run(key, take, charge)

    async def decide(self, key: VirtualKey) -> Decision:
        """Take one request (refused: nothing is taken)."""
        return await self._run(key, 1, 0)

    async def admit(self, key: VirtualKey, ex: Exchange, send: Send) -> bool:
        """Take one request for ``key``: True, with its ``x-ratelimit-*`` noted for the answer; or
        False once the client has its 429 (``ex.limited`` says which limit)."""
        if not (key.rpm or key.tpm):
            return True
        decision = await self.decide(key)
        if decision.refused:
            ex.limited = decision.refused
            await send_error(send, decision.error(), [*decision.headers(), *decision.retry_after()])
            return False
        ex.headers_out = decision.headers()
        return True

    async def charge(self, key: VirtualKey, tokens: int) -> None:
        """The tokens a finished request used."""
        if key.tpm and tokens > 0:
            await self._run(key, 0, tokens)

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close()


def limiter_for(url: str | None, keys: tuple[VirtualKey, ...], local: LocalBuckets | None = None) -> Limiter | None:
    """None when no key has a limit (nothing to count)."""
    if not any(k.rpm or k.tpm for k in keys):
        return None
    return Limiter(url, local)
