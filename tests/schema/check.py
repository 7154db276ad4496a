#!/usr/bin/env python3
"""tests/schema/check.py - an independent validator for the JSON Schema subset
of structured output (object, properties, required, additionalProperties,
array + items, string, number, integer, boolean, null, enum, const, anyOf,
$ref to "#" / "#/$defs/X" / "#/definitions/X", type arrays). Written from the
JSON Schema rules, not from the C matcher, so the two check each other.

Usage: check.py SCHEMA.json DOC.txt  -> exit 0 if DOC is one JSON value the
schema accepts, 1 with the reason otherwise."""
import json
import sys


def validate(s, v, root, path="#"):
    if s is True or s == {}:
        return
    if "$ref" in s:
        ref = s["$ref"]
        if ref == "#":
            return validate(root, v, root, path)
        kind, name = ref[2:].split("/", 1)
        return validate(root[kind][name], v, root, path)
    if "anyOf" in s:
        errs = []
        for alt in s["anyOf"]:
            try:
                validate(alt, v, root, path)
                return
            except ValueError as e:
                errs.append(str(e))
        raise ValueError(f"{path}: no anyOf branch matches: {errs}")
    if "enum" in s or "const" in s:
        vals = s["enum"] if "enum" in s else [s["const"]]
        if not any(type(v) == type(x) and v == x for x in vals):
            raise ValueError(f"{path}: {v!r} not in enum")
        return
    ty = s.get("type")
    if ty is None:
        ty = "object" if "properties" in s else None
    if ty is None:
        return
    types = ty if isinstance(ty, list) else [ty]
    errs = []
    for t in types:
        try:
            check_type(s, t, v, root, path)
            return
        except ValueError as e:
            errs.append(str(e))
    raise ValueError("; ".join(errs))


def check_type(s, t, v, root, path):
    ok = {
        "string": lambda: isinstance(v, str),
        "integer": lambda: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda: isinstance(v, bool),
        "null": lambda: v is None,
        "object": lambda: isinstance(v, dict),
        "array": lambda: isinstance(v, list),
    }[t]()
    if not ok:
        raise ValueError(f"{path}: {v!r} is not {t}")
    if t == "object":
        props = s.get("properties", {})
        for r in s.get("required", []):
            if r not in v:
                raise ValueError(f"{path}: missing {r}")
        for k, x in v.items():
            if k in props:
                validate(props[k], x, root, f"{path}/{k}")
            elif s.get("additionalProperties", True) is False:
                raise ValueError(f"{path}: extra property {k}")
    if t == "array" and "items" in s:
        for i, x in enumerate(v):
            validate(s["items"], x, root, f"{path}/{i}")


def main():
    schema = json.load(open(sys.argv[1]))
    text = open(sys.argv[2], encoding="utf-8").read()
    try:
        doc = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        validate(schema, doc, schema)
    except ValueError as e:
        print(f"invalid: {e}: {text[:200]!r}")
        sys.exit(1)


if __name__ == "__main__":
    main()
