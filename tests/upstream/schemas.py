"""JSON schemas the constrained-decoding tests ask for, and a check of a value against one.

``jsonschema`` is not among reef's dependencies, so :func:`violations` checks by hand the
keywords these schemas use (type, enum, properties, required, additionalProperties, items,
minItems/maxItems, minLength/maxLength, pattern, minimum/maximum, multipleOf) and refuses any
other.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CITY", "PET", "TOOL", "fmt", "violations"]

#: bounded everywhere (string lengths, items, a number's steps), so that even an untrained model,
#: writing whatever bytes the schema allows, ends well within the embedded model's 128-token reply
PET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "number", "minimum": 0, "maximum": 30, "multipleOf": 0.5},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2},
    },
    "required": ["name", "age", "kind", "tags"],
    "additionalProperties": False,
}

CITY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 16},
        "population": {"type": "integer", "minimum": 0, "maximum": 99999999},
        "capital": {"type": "boolean"},
    },
    "required": ["city", "population", "capital"],
    "additionalProperties": False,
}

TOOL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool": {"enum": ["search", "open", "close"]},
        "args": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 99},
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["tool", "args"],
    "additionalProperties": False,
}

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}
_KNOWN = {
    "type",
    "enum",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "multipleOf",
}


def fmt(schema: dict[str, Any], name: str = "answer") -> dict[str, Any]:
    """The ``response_format`` asking for ``schema``."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def violations(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """What in ``value`` breaks ``schema`` (empty: it validates)."""
    unknown = set(schema) - _KNOWN
    assert not unknown, f"the check does not know {sorted(unknown)}"
    found: list[str] = []
    kind = schema.get("type")
    if kind is not None and not _is(value, kind):
        return [f"{where} is not of type {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where} is not one of {schema['enum']}")
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
            found.append(f"{where} has {len(value)} characters")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            found.append(f"{where} does not match {schema['pattern']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            found.append(f"{where} = {value} is out of range")
        step = schema.get("multipleOf")
        if step is not None and abs(value / step - round(value / step)) > 1e-9:
            found.append(f"{where} = {value} is not a multiple of {step}")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)) or len(value) < schema.get("minItems", 0):
            found.append(f"{where} has {len(value)} items")
        for i, item in enumerate(value):
            found += violations(item, schema.get("items", {}), f"{where}[{i}]")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        found += [f"{where} lacks {key}" for key in schema.get("required", []) if key not in value]
        for key, item in value.items():
            if key in properties:
                found += violations(item, properties[key], f"{where}.{key}")
            elif schema.get("additionalProperties", True) is False:
                found.append(f"{where} has {key}, which the schema does not allow")
    return found


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])
