"""Which grammar, if any, a request's output must follow: `response_format`, vLLM-style `guided_*` fields, or a
tool_choice that forces a tool call ("required": a JSON array of calls; named: that tool's arguments)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..sampling_params import StructuredOutputParams
from .errors import bad_request
from .protocol import ChatCompletionRequest, SamplingFields
from .tool_parsers import JsonArrayToolParser, NamedToolParser, ToolParser

ANY_OBJECT = {"type": "object"}


@dataclass
class ToolPlan:
    tools: list[dict] | None = None  # rendered into the prompt; None when tool_choice is "none"
    parser: ToolParser | None = None  # None: the model family's parser (tool_choice "auto")
    constraint: StructuredOutputParams | None = None


def structured_output_of(body: SamplingFields, tool_plan: ToolPlan | None = None) -> StructuredOutputParams | None:
    """The one constraint the request asks for; asking for two is a 400."""
    found = [(name, params) for name, params in _requested(body) if params is not None]
    if tool_plan is not None and tool_plan.constraint is not None:
        found.append(("tool_choice", tool_plan.constraint))
    if len(found) > 1:
        raise bad_request(f"{found[0][0]} and {found[1][0]} both constrain the output: send only one",
                          found[1][0])
    return found[0][1] if found else None


def _requested(body: SamplingFields):
    if isinstance(body, ChatCompletionRequest):
        yield "response_format", _response_format(body)
    if body.guided_json is not None:
        yield "guided_json", schema_params(_parse_schema(body.guided_json), "guided_json")
    if body.guided_regex is not None:
        yield "guided_regex", StructuredOutputParams("regex", body.guided_regex)
    if body.guided_grammar is not None:
        yield "guided_grammar", StructuredOutputParams("grammar", body.guided_grammar)
    if body.guided_choice is not None:
        yield "guided_choice", StructuredOutputParams("grammar", "start: " + " | ".join(
            json.dumps(choice) for choice in body.guided_choice))


def _parse_schema(schema):
    if not isinstance(schema, str):
        return schema
    try:
        return json.loads(schema)
    except ValueError as exc:
        raise bad_request(f"guided_json is not valid JSON: {exc}", "guided_json") from None


def _response_format(body: ChatCompletionRequest) -> StructuredOutputParams | None:
    response_format = body.response_format
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return StructuredOutputParams("json_object")
    wrapper = response_format.json_schema or {}
    if not isinstance(wrapper.get("schema"), dict):
        raise bad_request("response_format.json_schema.schema must be a JSON schema object",
                          "response_format.json_schema")
    return schema_params(wrapper["schema"], "response_format.json_schema")


def schema_params(schema, param: str) -> StructuredOutputParams:
    if not isinstance(schema, dict):
        raise bad_request(f"{param} must be a JSON schema object", param)
    return StructuredOutputParams("json_schema", json.dumps(schema, sort_keys=True))


def make_tool_plan(body: ChatCompletionRequest) -> ToolPlan:
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    choice = body.tool_choice
    if choice is not None and choice != "none" and not tools:
        raise bad_request("tool_choice needs a non-empty 'tools' list", "tool_choice")
    if not tools or choice == "none":
        return ToolPlan()
    if choice is None or choice == "auto":
        return ToolPlan(tools)
    if choice == "required":
        items = {"anyOf": [_call_schema(t["function"]) for t in tools]}
        schema = {"type": "array", "minItems": 1, "items": items}
        if not body.parallel_tool_calls:
            schema["maxItems"] = 1
        return ToolPlan(tools, JsonArrayToolParser(), schema_params(schema, "tools"))
    function = next((t["function"] for t in tools if t["function"]["name"] == choice.function.name), None)
    if function is None:
        raise bad_request(f"tool_choice names function {choice.function.name!r}, which is not in 'tools'",
                          "tool_choice")
    return ToolPlan(tools, NamedToolParser(function["name"]),
                    schema_params(function.get("parameters") or ANY_OBJECT, "tools"))


def _call_schema(function: dict) -> dict:
    return {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
            "properties": {"name": {"const": function["name"]},
                           "arguments": function.get("parameters") or ANY_OBJECT}}
