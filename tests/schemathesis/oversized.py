"""Huge and deeply nested documents on every operation with a JSON request body of the
gateway's OpenAPI document (issue 14), after the schemathesis run: each must be
answered with a status the document lists for the operation, below 500, as the JSON
error, and small. Usage: oversized.py BASE_URL TOKEN (run.sh passes them).
"""

import json
import sys
import urllib.error
import urllib.request

MAX_ANSWER_BYTES = 16 * 1024


def call(base, token, method, path, body, content_type="application/json"):
    req = urllib.request.Request(
        base + path,
        data=body,
        method=method.upper(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def documents():
    nested = b"[" * 100_000 + b"]" * 100_000
    nested_objects = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    many_keys = json.dumps({f"k{i}": i for i in range(100_000)}).encode()
    huge = b'{"x": "' + b"a" * (16 << 20) + b'"}'
    return [
        ("100000 nested arrays", nested),
        ("50000 nested objects", nested_objects),
        ("100000 keys", many_keys),
        ("16 MiB string", huge),
    ]


def main():
    base, token = sys.argv[1].rstrip("/"), sys.argv[2]
    status, raw = call(base, token, "GET", "/v1/openapi.json", None)
    doc = json.loads(raw)
    failures, checked = [], 0
    for path, item in doc["paths"].items():
        if "{" in path:
            concrete = path.replace("{id}", "fuzz-none").replace("{digest}", "0" * 64)
        else:
            concrete = path
        if "*rest" in path:
            continue
        for method, op in item.items():
            if method == "parameters":
                continue
            content = op.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            documented = set(op.get("responses", {}))
            for what, body in documents():
                checked += 1
                status, answer = call(base, token, method, concrete, body)
                problem = None
                if status >= 500:
                    problem = "server error"
                elif str(status) not in documented:
                    problem = f"undocumented status (documented: {sorted(documented)})"
                elif status >= 400:
                    try:
                        code = json.loads(answer)["error"]["code"]
                    except (ValueError, KeyError, TypeError):
                        problem = "not the JSON error"
                    else:
                        if len(answer) > MAX_ANSWER_BYTES:
                            problem = f"answer of {len(answer)} bytes ({code})"
                line = f"{method.upper()} {path} ({what}): {status}"
                if problem:
                    failures.append(f"{line}: {problem}: {answer[:300]!r}")
                else:
                    print(f"ok  {line}")
    for f in failures:
        print(f"FAIL {f}")
    print(f"oversized documents: {checked} sent, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
