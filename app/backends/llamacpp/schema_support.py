"""Which JSON Schemas llama.cpp's grammar can enforce: everything else is refused with the reason, because
llama-cpp-python's converter silently skips what it does not know (``minimum`` on a number, ``uniqueItems``,
``not``, an unknown ``format`` …) and a reply would then break the schema it was promised to follow.

Enforced: ``type`` (one, or a list without further constraints), ``enum``, ``const``, ``anyOf``/``oneOf``
(as alternatives), ``allOf`` of object parts, local ``$ref`` (``#/…``), objects (``properties``,
``required``, ``additionalProperties``), arrays (``items`` with ``minItems``/``maxItems``, ``prefixItems``),
strings (``minLength``/``maxLength``, an anchored ``pattern``, ``format`` date/time/date-time/uuid) and integer
ranges (``minimum``/``maximum``, exclusive too: the app adds those rules). Annotations (``title``,
``description``, ``default`` …) are fine. Pure Python.
"""

from __future__ import annotations

from typing import Any

ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
     "writeOnly", "$defs", "definitions"}
)  # fmt: skip
TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"})
_COMBINATORS = ("$ref", "anyOf", "oneOf", "allOf", "enum", "const")
_OBJECT = frozenset({"properties", "required", "additionalProperties"})
_ARRAY = frozenset({"items", "prefixItems", "minItems", "maxItems"})
_STRING = frozenset({"minLength", "maxLength", "pattern", "format"})
_INTEGER = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_KNOWN = ANNOTATIONS | {"type", *_COMBINATORS} | _OBJECT | _ARRAY | _STRING | _INTEGER
_MAX_DEPTH = 64


class SchemaNotEnforceable(ValueError):
    """The schema uses something llama.cpp's grammar cannot enforce; the message says what and where."""


def check_enforceable(schema: Any, what: str = "the schema") -> None:
    """Raise SchemaNotEnforceable for the first part of ``schema`` a grammar would not enforce."""
    _Checker(schema, what).visit(schema, what, 0)


class _Checker:
    def __init__(self, root: Any, what: str) -> None:
        self._root = root
        self._what = what
        self._refs_seen: set[str] = set()

    def visit(self, node: Any, path: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise SchemaNotEnforceable(f"{self._what} is nested more than {_MAX_DEPTH} levels deep.")
        if isinstance(node, bool):
            if node is False:
                raise SchemaNotEnforceable(f"{path} is `false`: no value can match it.")
            return
        if not isinstance(node, dict):
            raise SchemaNotEnforceable(f"{path} must be a JSON Schema object.")
        for key in node:
            if key not in _KNOWN:
                raise SchemaNotEnforceable(f"{path} uses '{key}', which llama.cpp's grammar cannot enforce.")
        constraints = {k for k in node if k not in ANNOTATIONS and k != "type"}
        self._check_type(node, path, constraints)
        combinator = next((k for k in _COMBINATORS if k in node), None)
        if combinator is not None:
            self._check_combinator(node, combinator, path, constraints, depth)
            return
        self._check_object(node, path, depth)
        self._check_array(node, path, depth)
        self._check_string(node, path)
        self._check_integer(node, path)
        for name in ("$defs", "definitions"):
            for key, sub in (node.get(name) or {}).items():
                self.visit(sub, f"{path}.{name}.{key}", depth + 1)

    def _check_type(self, node: dict[str, Any], path: str, constraints: set[str]) -> None:
        kind = node.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
        if any(k not in TYPES for k in kinds):
            raise SchemaNotEnforceable(f"{path} has an unknown type {kind!r}.")
        if isinstance(kind, list) and constraints - {"enum", "const"}:
            raise SchemaNotEnforceable(
                f"{path} lists several types and also constrains them ({', '.join(sorted(constraints))}); "
                "use anyOf with one type per branch instead."
            )
        if constraints & _INTEGER and kind != "integer":
            raise SchemaNotEnforceable(
                f"{path} bounds a value that is not an integer (minimum/maximum): a grammar can bound integers only."
            )

    def _check_combinator(self, node: dict[str, Any], key: str, path: str, constraints: set[str], depth: int) -> None:
        others = constraints - {key}
        if others:
            raise SchemaNotEnforceable(
                f"{path} combines '{key}' with {', '.join(sorted(others))}; the grammar would enforce only '{key}'."
            )
        if key == "$ref":
            self._visit_ref(node["$ref"], path, depth)
        elif key in ("anyOf", "oneOf", "allOf"):
            branches = node[key]
            if not isinstance(branches, list) or not branches:
                raise SchemaNotEnforceable(f"{path}.{key} must be a non-empty list of schemas.")
            for index, branch in enumerate(branches):
                part = f"{path}.{key}[{index}]"
                if key == "allOf":
                    self._check_all_of_part(branch, part)
                self.visit(branch, part, depth + 1)
        elif key == "enum" and (not isinstance(node["enum"], list) or not node["enum"]):
            raise SchemaNotEnforceable(f"{path}.enum must be a non-empty list.")

    def _check_all_of_part(self, branch: Any, path: str) -> None:
        part = self._resolve(branch["$ref"], path) if isinstance(branch, dict) and "$ref" in branch else branch
        allowed = ANNOTATIONS | {"type", "properties", "required"}
        if not isinstance(part, dict) or set(part) - allowed or part.get("type", "object") != "object":
            raise SchemaNotEnforceable(
                f"{path}: allOf is enforced only for parts that add object properties (type, properties, required)."
            )

    def _visit_ref(self, ref: Any, path: str, depth: int) -> None:
        target = self._resolve(ref, path)
        if ref not in self._refs_seen:  # a recursive schema is checked once
            self._refs_seen.add(ref)
            self.visit(target, ref, depth + 1)

    def _resolve(self, ref: Any, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaNotEnforceable(f"{path} refers to {ref!r}: only references inside the schema (#/…) work.")
        target = self._root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise SchemaNotEnforceable(f"{path} refers to {ref}, which the schema does not define.")
            target = target[part]
        return target

    def _check_object(self, node: dict[str, Any], path: str, depth: int) -> None:
        properties = node.get("properties", {})
        if not isinstance(properties, dict):
            raise SchemaNotEnforceable(f"{path}.properties must be an object.")
        required = node.get("required", [])
        if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
            raise SchemaNotEnforceable(f"{path}.required must be a list of property names.")
        missing = [name for name in required if name not in properties]
        if missing:
            raise SchemaNotEnforceable(
                f"{path} requires {', '.join(missing)} without describing it under properties; describe every "
                "required property."
            )
        for name, sub in properties.items():
            self.visit(sub, f"{path}.properties.{name}", depth + 1)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            self.visit(extra, f"{path}.additionalProperties", depth + 1)

    def _check_array(self, node: dict[str, Any], path: str, depth: int) -> None:
        items, prefix = node.get("items"), node.get("prefixItems")
        counted = {"minItems", "maxItems"} & set(node)
        if items is not None and prefix is not None:
            raise SchemaNotEnforceable(f"{path} has both items and prefixItems; use one of them.")
        if counted and not isinstance(items, dict | bool):
            raise SchemaNotEnforceable(
                f"{path} limits the number of items ({', '.join(sorted(counted))}) without one items schema."
            )
        for name in counted:
            if not isinstance(node[name], int) or node[name] < 0:
                raise SchemaNotEnforceable(f"{path}.{name} must be a whole number, 0 or more.")
        tuple_items = prefix if prefix is not None else items if isinstance(items, list) else None
        if tuple_items is not None:
            for index, sub in enumerate(tuple_items):
                self.visit(sub, f"{path}.prefixItems[{index}]", depth + 1)
        elif items is not None:
            self.visit(items, f"{path}.items", depth + 1)

    def _check_string(self, node: dict[str, Any], path: str) -> None:
        used = _STRING & set(node)
        if not used:
            return
        if node.get("type") != "string":
            raise SchemaNotEnforceable(f"{path} uses {', '.join(sorted(used))} without type string.")
        if len(used) > 1 and used & {"pattern", "format"}:
            raise SchemaNotEnforceable(
                f"{path} combines {', '.join(sorted(used))}; the grammar enforces a pattern or a format alone."
            )
        if "format" in node and node["format"] not in FORMATS:
            raise SchemaNotEnforceable(
                f"{path} has format '{node['format']}'; the grammar enforces only {', '.join(sorted(FORMATS))}."
            )
        for name in ("minLength", "maxLength"):
            if name in node and (not isinstance(node[name], int) or node[name] < 0):
                raise SchemaNotEnforceable(f"{path}.{name} must be a whole number, 0 or more.")

    def _check_integer(self, node: dict[str, Any], path: str) -> None:
        for name in _INTEGER & set(node):
            if isinstance(node[name], bool) or not isinstance(node[name], int | float):
                raise SchemaNotEnforceable(f"{path}.{name} must be a number.")
