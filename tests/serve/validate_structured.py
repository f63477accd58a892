#!/usr/bin/python3
# The independent validator of tests/serve/structured_test.js: reads a JSON list of
# {id, kind: json|regex|choice, schema|pattern|choices, text} on stdin and prints the list of
# {id, error} for the outputs that do not validate (JSON with python3-jsonschema, formats
# checked; regex with re.fullmatch; choice by membership).
import json
import re
import sys

import jsonschema

failures = []
for case in json.load(sys.stdin):
    text = case["text"]
    try:
        if case["kind"] == "json":
            schema = case["schema"]
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
            cls.check_schema(schema)
            cls(schema, format_checker=jsonschema.FormatChecker()).validate(json.loads(text))
        elif case["kind"] == "regex":
            if re.fullmatch(case["pattern"], text) is None:
                raise ValueError("no full match")
        elif case["kind"] == "choice":
            if text not in case["choices"]:
                raise ValueError("not one of the choices")
        else:
            raise ValueError("unknown kind")
    except Exception as e:  # noqa: BLE001 - every failure is reported
        failures.append({"id": case["id"], "error": f"{type(e).__name__}: {e}", "text": text})
print(json.dumps(failures))
