"""Checks answers against docs/openapi.yaml; run by test_openapi.py with
the venv's Python (jsonschema, PyYAML: tests/requirements.txt).

    python openapi_check.py SPEC.yaml < answers.jsonl

Each input line is {"op": operationId, "status": int, "content_type": str,
"body": <JSON or null>}; prints one line per problem (an undocumented
status or content type, a body its schema refuses) and exits 1 if any.
"""

import json
import sys

import jsonschema
import referencing
import referencing.jsonschema
import yaml


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    resource = referencing.Resource.from_contents(
        spec, default_specification=referencing.jsonschema.DRAFT202012)
    registry = referencing.Registry().with_resource("spec.json", resource)
    ops = {}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "operationId" in op:
                ops[op["operationId"]] = ("/paths/%s/%s" % (
                    path.replace("~", "~0").replace("/", "~1"), method), op)
    problems = 0
    for n, line in enumerate(sys.stdin, 1):
        a = json.loads(line)
        pointer, op = ops[a["op"]]
        what = "%d %s %d" % (n, a["op"], a["status"])
        resp = op["responses"].get(str(a["status"]))
        if resp is None:
            print("%s: status not documented" % what)
            problems += 1
            continue
        if "$ref" in resp:
            name = resp["$ref"].rsplit("/", 1)[1]
            pointer = "/components/responses/" + name
            resp = spec["components"]["responses"][name]
        else:
            pointer += "/responses/%d" % a["status"]
        content = resp.get("content", {})
        ctype = a.get("content_type") or ""
        if ctype not in content:
            print("%s: content type %r not documented (%s)"
                  % (what, ctype, sorted(content)))
            problems += 1
            continue
        if not ctype.startswith("application/json"):
            continue
        ref = "spec.json#%s/content/%s/schema" % (
            pointer, ctype.replace("~", "~0").replace("/", "~1"))
        v = jsonschema.Draft202012Validator({"$ref": ref}, registry=registry)
        for e in v.iter_errors(a["body"]):
            print("%s: %s at %s (body %s)" % (
                what, e.message[:300], "/".join(map(str, e.absolute_path)),
                json.dumps(a["body"])[:300]))
            problems += 1
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
