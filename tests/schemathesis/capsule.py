"""Stores a capsule for the fuzz run (tests/schemathesis/run.sh) by submitting one
small job with code, and prints the capsule's digest: JSON submissions name it.
Usage: capsule.py BASE_URL TOKEN.
"""

import io
import json
import sys
import urllib.request
import uuid
import zipfile


def main():
    base, token = sys.argv[1].rstrip("/"), sys.argv[2]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("train.py", "print('fuzz')\n")
    spec = {
        "name": "fuzz-seed",
        "framework": "nemo-rl",
        "entrypoint": "python train.py",
        "pools": [{"name": "main", "nodes": 1, "gpusPerNode": 1}],
    }
    boundary = uuid.uuid4().hex
    parts = [
        ("spec", "spec.json", "application/json", json.dumps(spec).encode()),
        ("code", "code.zip", "application/zip", code.getvalue()),
    ]
    body = b""
    for name, filename, ctype, data in parts:
        body += (
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; "
            f"filename=\"{filename}\"\r\nContent-Type: {ctype}\r\n\r\n"
        ).encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    req = urllib.request.Request(
        base + "/v1/jobs",
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        job = json.loads(r.read())
    print(job["capsuleSha256"])


if __name__ == "__main__":
    main()
