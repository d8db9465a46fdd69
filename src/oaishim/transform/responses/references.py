"""``item_reference`` inputs: an item of an earlier stored response, named by its id.

Clients that keep ``store: true`` send earlier items back as references instead of the items
themselves (the Vercel AI SDK does so for reasoning, then for every item it got from the server).
The ids the gateway gives the items of a response carry that response's id (``_info.item_ids``),
so the server reads one stored record per referenced response (the tenant's own: another key's
record is not found) and the references are replaced by the items before the request is mapped.

An id that names no stored item — made elsewhere, of a ``store: false`` response, expired,
deleted, another tenant's — is the official 404 ``Item with id '…' not found.``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oaishim.transform.responses._info import response_of_item
from oaishim.transform.validate._errors import invalid_type, missing
from oaishim.wire.errors import OpenAIError, not_found

__all__ = ["referenced_responses", "replace_references"]


def _references(body: dict[str, Any]) -> list[tuple[int, str]]:
    source = body.get("input")
    if not isinstance(source, list):
        return []
    out = []
    for i, item in enumerate(source):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            ref = item.get("id")
            if ref is None:
                raise missing(f"input[{i}].id")
            if not isinstance(ref, str):
                raise invalid_type(f"input[{i}].id", "a string", ref)
            out.append((i, ref))
    return out


def _not_found(item_id: str) -> OpenAIError:
    return not_found(
        f"Item with id '{item_id}' not found. Items are not persisted when `store` is set to false. Try again "
        "with `store` set to true, or remove this item from your input.",
        param="input",
    )


def referenced_responses(body: dict[str, Any]) -> list[str]:
    """The stored responses the request's references point into (to read before mapping it)."""
    out: list[str] = []
    for _, ref in _references(body):
        response_id = response_of_item(ref)
        if response_id is None:
            raise _not_found(ref)
        if response_id not in out:
            out.append(response_id)
    return out


def replace_references(body: dict[str, Any], records: Mapping[str, tuple[list[Any], list[Any]] | None]) -> Any:
    """``body`` with each reference replaced by its item; ``records``: response id -> (its output,
    its input items), or None where it is not found."""
    refs = _references(body)
    if not refs:
        return body
    items = list(body["input"])
    for i, ref in refs:
        response_id = response_of_item(ref)
        record = records.get(response_id) if response_id is not None else None
        found = None
        if record is not None:
            found = next((x for x in (*record[0], *record[1]) if isinstance(x, dict) and x.get("id") == ref), None)
        if found is None:
            raise _not_found(ref)
        items[i] = dict(found)
    return {**body, "input": items}
