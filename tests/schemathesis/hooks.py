"""Schemathesis hooks for the gateway's fuzz run (tests/schemathesis/run.sh).

Schema-valid (positive) cases are completed with what a schema cannot state, so that
`positive_data_acceptance` holds the gateway to accepting every request the document
promises; negative cases are left as generated. Each repair names the rule it stands
for (the JobSpec's are listed in the schema's description, `UNSTATED_RULES`):

- a JSON submission names a capsule that exists: `run.sh` uploads one first
  (FORGE_FUZZ_CAPSULE), and a multipart one carries a real code archive;
- JobSpec cross-field rules: unique pool names; memory at least 256Mi, object store
  at least 75Mi and less than the memory; a variable in env or secretEnv, not both;
  secretEnv Secrets of the caller's team (FORGE_FUZZ_TEAM); pip lines the gateway
  can vouch for;
- a plugin's `settings` part is JSON text;
- a playground's idle TTL is at most its TTL;
- a log is read from an `offset` or its `tail`, not both, of the driver/head (`name`) or
  one `pod`, not both (`container` only with `pod`), and without `follow` (it would
  stream until the job ends, and no job ends in the fuzz run).
"""

import io
import os
import zipfile

import schemathesis
from schemathesis import GenerationMode

TEAM = os.environ.get("FORGE_FUZZ_TEAM", "team-a")
CAPSULE = os.environ.get("FORGE_FUZZ_CAPSULE", "")


def code_archive() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("train.py", "print('fuzz')\n")
    return buf.getvalue()


CODE = code_archive()


def repair_spec(spec):
    if not isinstance(spec, dict):
        return spec
    pools = spec.get("pools")
    if isinstance(pools, list):
        seen = set()
        for i, pool in enumerate(pools):
            if not isinstance(pool, dict):
                continue
            name = pool.get("name")
            if isinstance(name, str):
                while name in seen:
                    name = f"p{i}-{len(seen)}"
                pool["name"] = name
                seen.add(name)
            if isinstance(pool.get("memoryPerNode"), str):
                pool["memoryPerNode"] = "64Gi"
            if isinstance(pool.get("objectStoreMemory"), str):
                pool["objectStoreMemory"] = "8Gi"
    env = spec.get("env")
    secret_env = spec.get("secretEnv")
    if isinstance(secret_env, dict):
        if isinstance(env, dict):
            for key in list(env):
                if key in secret_env:
                    del env[key]
        for ref in secret_env.values():
            if isinstance(ref, dict) and isinstance(ref.get("secret"), str):
                ref["secret"] = f"{TEAM}.fuzz"
        if isinstance(env, dict) and len(env) + len(secret_env) > 256:
            for key in list(secret_env)[: len(env) + len(secret_env) - 256]:
                del secret_env[key]
    if isinstance(spec.get("pip"), list):
        spec["pip"] = ["numpy" for _ in spec["pip"]]
    return spec


@schemathesis.hook
def map_case(context, case):
    path, body, query = case.operation.path, case.body, case.query
    if path == "/v1/jobs/{id}/logs" and isinstance(query, dict) and query.get("follow") is True:
        # `follow` keeps the answer open until the job ends, and in the fuzz run
        # (`--sim api-only`) no job ever ends: every case, positive or negative, reads
        # the log without it (a negative case keeps its own violation).
        query["follow"] = False
    meta = case.meta
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return case
    if path == "/v1/jobs/{id}/logs" and isinstance(query, dict):
        # `offset` or `tail`, not both; `name` or `pod`, not both; `container` only with
        # `pod` (parameters cannot exclude or require each other in OpenAPI).
        if "offset" in query and "tail" in query:
            del query["tail"]
        if "name" in query and "pod" in query:
            del query["name"]
        if "container" in query and "pod" not in query:
            del query["container"]
    elif path == "/v1/admission/review":
        case.body = repair_spec(body)
    elif path == "/v1/jobs" and case.method.upper() == "POST" and isinstance(body, dict):
        if "spec" in body:
            body["spec"] = repair_spec(body["spec"])
        if "capsule" in body and CAPSULE:
            body["capsule"] = CAPSULE
        if "code" in body:
            body["code"] = CODE
    elif path == "/v1/plugins" and case.method.upper() == "POST" and isinstance(body, dict):
        # `settings` is a JSON text part: the plugin's own validate-settings judges it.
        if isinstance(body.get("settings"), str):
            body["settings"] = "{}"
    elif path == "/v1/playgrounds" and case.method.upper() == "POST" and isinstance(body, dict):
        ttl, idle = body.get("ttlSeconds"), body.get("idleSeconds")
        if isinstance(ttl, (int, float)) and isinstance(idle, (int, float)) and idle > ttl:
            body["idleSeconds"] = ttl
    return case
