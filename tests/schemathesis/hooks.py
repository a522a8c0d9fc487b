"""Schemathesis hooks for the gateway's fuzz run (tests/schemathesis/run.sh).

Schema-valid (positive) cases are completed with what a schema cannot state, so that
`positive_data_acceptance` holds the gateway to accepting every request the document
promises; negative cases are left as generated. Each repair names the rule it stands
for (the JobSpec's are listed in the schema's description, `UNSTATED_RULES`):

- a JSON submission names a capsule that exists: `run.sh` uploads one first
  (FORGE_FUZZ_CAPSULE), and a multipart one carries a real code archive;
- JobSpec cross-field rules (`UNSTATED_RULES` in the schema's description): unique
  pool names; memory at least 256Mi, object store at least 75Mi and less than the
  memory (repaired only when broken, so the quantity patterns are fuzzed); at most 256
  variables in env and secretEnv together, a name in one of them only; secretEnv
  Secrets of the caller's team (FORGE_FUZZ_TEAM).

Everything else a positive case must follow is in the document itself (which log and
where to start, pip lines, quantities, a plugin's settings, chain lengths, a
playground's idle TTL).
"""

import io
import os
import re
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


# Bytes per unit of a Kubernetes quantity (the published pattern's suffixes).
UNITS = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
         "P": 1e15, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
MIN_MEMORY = 256 * 2**20
MIN_STORE = 75 * 2**20


def quantity_bytes(q):
    """Bytes of a quantity that follows the published pattern, else None."""
    m = re.fullmatch(r"([0-9]*\.?[0-9]*)([eE][-+]?[0-9]|[A-Za-z]*)", q)
    if not m or m.group(1) in ("", "."):
        return None
    number, suffix = float(m.group(1)), m.group(2)
    if suffix[:1] in ("e", "E"):
        return number * 10 ** int(suffix[1:])
    return number * UNITS[suffix] if suffix in UNITS else None


def repair_pool(pool):
    memory = pool.get("memoryPerNode")
    store = pool.get("objectStoreMemory")
    m = quantity_bytes(memory) if isinstance(memory, str) else None
    s = quantity_bytes(store) if isinstance(store, str) else None
    if m is not None and m < MIN_MEMORY:
        pool["memoryPerNode"], m = "64Gi", 64 * 2**30
    if s is not None and s < MIN_STORE:
        pool["objectStoreMemory"], s = "8Gi", 8 * 2**30
    if m is not None and s is not None and s >= m:
        pool["memoryPerNode"], pool["objectStoreMemory"] = "64Gi", "8Gi"


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
            repair_pool(pool)
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
    return spec


@schemathesis.hook
def map_case(context, case):
    path, body = case.operation.path, case.body
    meta = case.meta
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return case
    if path == "/v1/admission/review":
        case.body = repair_spec(body)
    elif path == "/v1/jobs" and case.method.upper() == "POST" and isinstance(body, dict):
        if "spec" in body:
            body["spec"] = repair_spec(body["spec"])
        if "capsule" in body and CAPSULE:
            body["capsule"] = CAPSULE
        if "code" in body:
            body["code"] = CODE
    return case
