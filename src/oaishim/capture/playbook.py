"""What a mock backend answers: recorded responses, looked up by method, path and normalised body.

Which side of a record answers is a choice: ``upstream`` (the default) serves what the backend
sent the gateway, so a mock stands in for the engine behind a gateway; ``client`` serves what the
client received. A proxy capture has both sides, byte for byte the same. A record without the
chosen side (a request the gateway refused itself) is not served.

Bodies are compared as canonical JSON (keys sorted, no whitespace), so a client that orders its
keys differently still matches; a body that is not JSON is compared byte for byte. When the same
request was recorded several times its answers are played in turn, round robin.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from oaishim.capture.record import Record, body_bytes, path_of, request_json, side

Side = Literal["upstream", "client"]
Key = tuple[str, str, bytes]


def normalise_body(body: bytes) -> bytes:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.strip()
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def key_of(method: str, target: str, body: bytes) -> Key:
    return method.upper(), path_of(target), normalise_body(body)


@dataclass(frozen=True, slots=True)
class Play:
    record_id: str
    request: Mapping[str, Any]
    response: Mapping[str, Any]


@dataclass
class Playbook:
    side: Side = "upstream"
    plays: dict[Key, list[Play]] = field(default_factory=dict)
    models_seen: dict[str, None] = field(default_factory=dict)
    _turns: dict[Key, Iterator[Play]] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Iterable[Record], side: Side = "upstream") -> Playbook:
        book = cls(side)
        for record in records:
            book.add(record)
        return book

    def add(self, record: Record) -> bool:
        exchange = side(record, self.side)
        request, response = exchange.get("request"), exchange.get("response")
        if not isinstance(request, Mapping) or not isinstance(response, Mapping):
            return False
        key = key_of(str(request.get("method", "")), str(request.get("target", "")), body_bytes(request))
        self.plays.setdefault(key, []).append(Play(str(record.get("id", "")), request, response))
        self._turns.pop(key, None)
        model = (request_json(request) or {}).get("model")
        if isinstance(model, str):
            self.models_seen[model] = None
        return True

    def __len__(self) -> int:
        return sum(len(p) for p in self.plays.values())

    def match(self, method: str, target: str, body: bytes) -> Play | None:
        key = key_of(method, target, body)
        if key not in self.plays:
            return None
        if key not in self._turns:
            self._turns[key] = itertools.cycle(self.plays[key])
        return next(self._turns[key])

    def models(self, created: int = 0) -> dict[str, Any]:
        """A ``/v1/models`` listing of the models the recorded requests asked for."""
        cards = [{"id": m, "object": "model", "created": created, "owned_by": "oaishim-mock"} for m in self.models_seen]
        return {"object": "list", "data": cards}

    def near_misses(self, method: str, target: str) -> int:
        """How many recorded requests share the method and path (for the no-match message)."""
        head = (method.upper(), path_of(target))
        return sum(len(plays) for key, plays in self.plays.items() if key[:2] == head)
