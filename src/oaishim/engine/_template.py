"""The tiny model's chat template: Qwen3-style ChatML, written for both Jinja engines.

One template serves llama.cpp (its own Jinja subset, minja) and vLLM / transformers (jinja2), so
it keeps to features both have: ``{%- -%}`` everywhere (no reliance on trim settings), ``is
string`` / ``is mapping`` tests, a macro, ``tojson``. What it renders, as Qwen3 does:

* system (and ``developer``, rendered as system) first, with a ``# Tools`` block listing the tools
  as JSON inside ``<tools></tools>`` when there are tools;
* assistant turns: ``reasoning_content`` as ``<think>\\n…\\n</think>\\n\\n`` before the content,
  each tool call as ``<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>`` (arguments given as
  a JSON string are inserted as they are);
* consecutive tool results grouped in one user turn, each in ``<tool_response>``;
* content given as a list of parts renders its text parts;
* ``add_generation_prompt`` opens the assistant turn; ``enable_thinking=false`` pre-fills an empty
  think block, as Qwen3 does.

llama.cpp recognises the Hermes tool-call format and the ``<think>`` reasoning from the template's
text, so those literal strings matter. Unlike Qwen3, reasoning is rendered on every assistant turn
that carries it (Qwen3 drops it before the last user turn): a client that sends it back sees it used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

CHAT_TEMPLATE = r"""{%- macro render_content(content) -%}
{%- if content is string -%}
{{- content -}}
{%- elif content is iterable and content is not mapping -%}
{%- for part in content -%}
{%- if part is string -%}
{{- part -}}
{%- elif part is mapping and part.type == 'text' -%}
{{- part.text -}}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- set has_system = messages and messages[0].role in ['system', 'developer'] -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if has_system -%}
{{- render_content(messages[0].content) -}}
{{- '\n\n' -}}
{%- endif -%}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
{%- for tool in tools -%}
{{- '\n' -}}
{{- tool | tojson -}}
{%- endfor -%}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
{{- '<|im_start|>system\n' -}}
{{- render_content(messages[0].content) -}}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if loop.first and has_system -%}
{%- elif message.role in ['user', 'system', 'developer'] -%}
{{- '<|im_start|>' + ('system' if message.role == 'developer' else message.role) + '\n' -}}
{{- render_content(message.content) -}}
{{- '<|im_end|>\n' -}}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if message.reasoning_content is string and message.reasoning_content -%}
{{- '<think>\n' + message.reasoning_content.strip('\n') + '\n</think>\n\n' -}}
{%- endif -%}
{{- render_content(message.content) -}}
{%- if message.tool_calls -%}
{%- for tool_call in message.tool_calls -%}
{%- if not loop.first or message.content -%}
{{- '\n' -}}
{%- endif -%}
{%- if tool_call.function -%}
{%- set tool_call = tool_call.function -%}
{%- endif -%}
{{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' -}}
{%- if tool_call.arguments is string -%}
{{- tool_call.arguments -}}
{%- else -%}
{{- tool_call.arguments | tojson -}}
{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
{{- '<|im_start|>user' -}}
{%- endif -%}
{{- '\n<tool_response>\n' -}}
{{- render_content(message.content) -}}
{{- '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\n\n</think>\n\n' -}}
{%- endif -%}
{%- endif -%}
"""


def _tojson(value: Any, indent: int | None = None) -> str:
    # transformers' filter: plain json.dumps (no HTML escaping, no key sorting, unlike jinja2's).
    return json.dumps(value, ensure_ascii=False, indent=indent)


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    template: str = CHAT_TEMPLATE,
    **extra: Any,
) -> str:
    """Render a chat the way transformers' ``apply_chat_template`` does (needs jinja2).

    Same environment settings (sandboxed, ``trim_blocks``, ``lstrip_blocks``, loop controls) and
    the same ``tojson``; used by tests and by anything that must build the prompt itself.
    """
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    return env.from_string(template).render(
        messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **extra
    )
