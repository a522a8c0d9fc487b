"""Real Ray in `forge-gateway dev`, timed (tests/bench/ray_dev.sh starts the gateway).

Submits the seven-line Ray program of issue 36 (tests/fixtures/ray/gpu_tasks.py, with a
first line printed before `ray.init()`) once on a 3-machine gang (for its memory), then
on a 2-machine gang ROUNDS times, one after the other, and measures from the submit
request to
- the driver's first output line in the job's live log (`GET /v1/jobs/{id}/logs`,
  polled every 50 ms),
- the program's result line,
and for each Ray node (pod) of the gang, read from the emulated API server: pod created
→ container started → Ready (KubeRay's probes passed), and the resident memory of the
node's processes (every process carrying its temp dir in FORGE_KUBESIM_REMOVE_AFTER,
the driver included on the head) while the program holds after its result: RSS summed,
and PSS (shared pages split between the processes that map them), from /proc.

The baseline, in the same run: the same program on a bare 2-node Ray started by hand on
this machine (`ray start` twice, `ray job submit`), from the first `ray start`.

    python ray_dev.py GATEWAY_URL TOKEN KUBECONFIG NAMESPACE ROUNDS RAY_VENV_BIN

Prints `BENCH ray_dev key=value ...` lines (medians over the rounds).
"""

import io
import json
import os
import statistics
import sys
import time
import urllib.request
import uuid
import zipfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = b"FORGE_KUBESIM_REMOVE_AFTER="
HOLD_S = 6


def program():
    body = (ROOT / "tests/fixtures/ray/gpu_tasks.py").read_text()
    first = 'print("forge-bench first line", flush=True)\n'
    hold = f"import time; time.sleep({HOLD_S})\n"
    return first + body + hold


def code_zip():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("gpu_tasks.py", program())
    return buf.getvalue()


def submit(url, token, name, nodes):
    spec = {
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": "python3 gpu_tasks.py",
        "pools": [{"name": "train", "nodes": nodes, "gpusPerNode": 2}],
    }
    boundary = uuid.uuid4().hex
    parts = [
        (b'Content-Disposition: form-data; name="spec"\r\nContent-Type: application/json\r\n\r\n', json.dumps(spec).encode()),
        (b'Content-Disposition: form-data; name="code"; filename="code.zip"\r\nContent-Type: application/zip\r\n\r\n', code_zip()),
    ]
    body = b""
    for head, data in parts:
        body += b"--" + boundary.encode() + b"\r\n" + head + data + b"\r\n"
    body += b"--" + boundary.encode() + b"--\r\n"
    req = urllib.request.Request(
        f"{url}/v1/jobs",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    with urllib.request.urlopen(req) as r:
        return json.load(r)["id"]


def get(url, token, path):
    req = urllib.request.Request(f"{url}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read()
    except Exception:
        return b""


class Kube:
    """The emulated API server, from the kubeconfig dev wrote (server and token)."""

    def __init__(self, kubeconfig, namespace):
        import base64
        import ssl

        import yaml  # PyYAML comes with ray[default]: this script runs on its venv

        doc = yaml.safe_load(Path(kubeconfig).read_text())
        cluster = doc["clusters"][0]["cluster"]
        self.server = cluster["server"]
        self.token = doc["users"][0]["user"].get("token")
        self.ssl = None
        if "certificate-authority-data" in cluster:
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
            self.ssl = ssl.create_default_context(cadata=ca)
        self.namespace = namespace

    def pods(self):
        req = urllib.request.Request(f"{self.server}/api/v1/namespaces/{self.namespace}/pods")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=10, context=self.ssl) as r:
            return json.load(r)["items"]


def node_memory():
    """{node temp dir: (rss bytes, pss bytes)} over every marked process."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            mark = next((e[len(MARK):] for e in env if e.startswith(MARK)), None)
            if mark is None:
                continue
            rss = pss = 0
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
        except OSError:
            continue
        r, p = out.get(mark, (0, 0))
        out[mark] = (r + rss, p + pss)
    return out


def one_round(url, token, kube, n, nodes):
    t0 = time.monotonic()
    job = submit(url, token, f"ray-bench-{n}", nodes)
    first = result = None
    pods = {}  # name -> {"seen", "started", "ready"} (monotonic seconds since submit)
    memory = {}
    deadline = t0 + 300
    while time.monotonic() < deadline:
        now = time.monotonic() - t0
        try:
            for p in kube.pods():
                labels = p["metadata"].get("labels", {})
                if labels.get("forge.dev/job-id") != job or labels.get("ray.io/is-ray-node") != "yes":
                    continue
                seen = pods.setdefault(p["metadata"]["name"], {"seen": now})
                statuses = p.get("status", {}).get("containerStatuses") or []
                if statuses and "running" in (statuses[0].get("state") or {}):
                    seen.setdefault("started", now)
                if any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])):
                    seen.setdefault("ready", now)
        except Exception:
            pass
        log = get(url, token, f"/v1/jobs/{job}/logs").decode(errors="replace")
        if first is None and "forge-bench first line" in log:
            first = now
        if result is None and f"alive={nodes} gpus={2 * nodes} tasks=4" in log:
            result = now
            time.sleep(HOLD_S / 2)
            memory = node_memory()
            break
        time.sleep(0.05)
    if first is None or result is None:
        sys.exit(f"round {n}: job {job} printed no {'first line' if first is None else 'result'} within 300 s:\n{log}")
    # Wait for the job to end and its Ray processes to go before the next round.
    while time.monotonic() < t0 + 600:
        view = json.loads(get(url, token, f"/v1/jobs/{job}") or b"{}")
        if view.get("state") in ("succeeded", "failed", "cancelled", "timed-out") and not node_memory():
            break
        time.sleep(0.2)
    return first, result, pods, memory


def free_port(ip):
    import socket

    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def end_marked(needle):
    """SIGKILLs every process whose environment holds `needle`, until none is left."""
    import signal

    for _ in range(200):
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    if stat[stat.rindex(")") + 2] != "Z":
                        left.append(int(pid))
            except OSError:
                continue
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def node_ports(ip, workers_from):
    """Ports of their own for two Ray nodes on one machine: some of Ray's listeners bind
    every interface, so the defaults of a second node would collide with the first's."""
    flags = ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
             "--runtime-env-agent-port", "--node-manager-port", "--object-manager-port"]
    ports = [f"{flag}={free_port(ip)}" for flag in flags]
    return ports + [f"--min-worker-port={workers_from}", f"--max-worker-port={workers_from + 99}"]


def bare_ray_round(ray_bin, n):
    """The baseline: the same program on a bare 2-node Ray started on this machine
    (`ray start --head`, `ray start --address`, then `ray job submit`), no Kubernetes,
    no gateway. Seconds from the first `ray start` to the first line and the result."""
    import subprocess
    import tempfile

    ips = ["127.78.0.1", "127.78.0.2"]
    tmp = tempfile.mkdtemp(prefix="fb-")
    code = tempfile.mkdtemp(prefix="fb-code-")
    Path(code, "gpu_tasks.py").write_text(program())
    gcs, dash = free_port(ips[0]), free_port(ips[0])
    common = ["--num-gpus=2", "--num-cpus=8", '--resources={"forge.pool.train": 1}',
              "--object-store-memory=134217728", "--disable-usage-stats"]
    # Its processes carry this mark: they are ended by it (`ray stop` would end every
    # Ray of this user on the machine).
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", FORGE_BENCH_BARE_RAY=tmp)
    env["PATH"] = f"{ray_bin}:{env.get('PATH', '')}"  # the driver's python3 is Ray's
    first = result = None
    seen = []
    t0 = time.monotonic()
    try:
        subprocess.run([f"{ray_bin}/ray", "start", "--head", f"--node-ip-address={ips[0]}", f"--port={gcs}",
                        f"--dashboard-host={ips[0]}", f"--dashboard-port={dash}", f"--temp-dir={tmp}/h",
                        *node_ports(ips[0], 21000), *common],
                       check=True, capture_output=True, env=env)
        subprocess.run([f"{ray_bin}/ray", "start", f"--address={ips[0]}:{gcs}", f"--node-ip-address={ips[1]}",
                        f"--temp-dir={tmp}/w", *node_ports(ips[1], 21200), *common],
                       check=True, capture_output=True, env=env)
        # Right after `ray start` the head may have no job agent yet ("No available
        # agent to submit job"): submitted again until one takes it, as KubeRay's
        # submitter waits for the dashboard first.
        while first is None and time.monotonic() - t0 < 120:
            job = subprocess.Popen([f"{ray_bin}/ray", "job", "submit", f"--address=http://{ips[0]}:{dash}",
                                    f"--working-dir={code}", "--", "python3", "gpu_tasks.py"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            for line in job.stdout:
                seen.append(line)
                now = time.monotonic() - t0
                if first is None and "forge-bench first line" in line:
                    first = now
                if "alive=2 gpus=4 tasks=4" in line:
                    result = now
            job.wait()
            if first is None:
                time.sleep(0.2)
    finally:
        end_marked(b"FORGE_BENCH_BARE_RAY=" + tmp.encode())
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(code, ignore_errors=True)
    if first is None or result is None:
        sys.exit(f"bare Ray round {n}: no first line or result:\n{''.join(seen[-30:])}")
    print(f"bare Ray round {n}: first line {first:.2f} s, result {result:.2f} s", flush=True)
    return first, result


def report(n, nodes, first, result, pods, memory):
    ready = ", ".join(f"{p.get('ready', 0) - p.get('started', 0):.2f} s" for p in pods.values())
    mem = ", ".join(f"{r / 2**20:.0f} MiB RSS / {s / 2**20:.0f} MiB PSS" for r, s in memory.values())
    print(
        f"round {n} ({nodes} machines): first line {first:.2f} s, result {result:.2f} s, "
        f"container started -> Ready per node: {ready}; memory per node: {mem}",
        flush=True,
    )


def main():
    url, token, kubeconfig, namespace, rounds, ray_bin = sys.argv[1:7]
    kube = Kube(kubeconfig, namespace)
    # The 3-machine gang, once: its memory.
    first, result, pods, memory = one_round(url, token, kube, "gang3", 3)
    report("gang3", 3, first, result, pods, memory)
    gang3_pss = sum(s for _, s in memory.values()) / 2**20
    gang3_rss = sum(r for r, _ in memory.values()) / 2**20
    firsts, results, starts, readies, rss, pss = [], [], [], [], [], []
    for n in range(int(rounds)):
        first, result, pods, memory = one_round(url, token, kube, n, 2)
        report(n, 2, first, result, pods, memory)
        firsts.append(first)
        results.append(result)
        for p in pods.values():
            if "started" in p and "ready" in p:
                starts.append(p["ready"] - p["started"])
                readies.append(p["ready"] - p["seen"])
        for r, s in memory.values():
            rss.append(r / 2**20)
            pss.append(s / 2**20)
    med = statistics.median
    bare = [bare_ray_round(ray_bin, n) for n in range(int(rounds))]
    bare_first = med(f for f, _ in bare)
    bare_result = med(r for _, r in bare)
    print(
        f"BENCH ray_bare rounds={rounds} first_p50_s={bare_first:.2f} result_p50_s={bare_result:.2f}"
    )
    print(
        f"BENCH ray_dev rounds={rounds} first_p50_s={med(firsts):.2f} first_max_s={max(firsts):.2f} "
        f"result_p50_s={med(results):.2f} node_start_p50_s={med(starts):.2f} "
        f"node_created_to_ready_p50_s={med(readies):.2f} node_rss_p50_mib={med(rss):.0f} "
        f"node_pss_p50_mib={med(pss):.0f} gang3_pss_mib={gang3_pss:.0f} gang3_rss_mib={gang3_rss:.0f}"
    )


if __name__ == "__main__":
    main()
