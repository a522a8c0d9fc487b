#!/usr/bin/env bash
# The benchmark command (issue 19): release builds, then every measurement side by side
# in one run, then one table of figures and ratios against baselines measured in the
# same run. Absolute figures on a shared 2-core machine move by ±50 % between runs;
# the goals are ratios where a baseline exists.
#
#   bash tests/bench/run.sh            # everything below
#
# - policy chain (`cargo bench -p forge-policy-host --bench policy_chain`): the 3-plugin
#   reference chain with warm instances and with a fresh instance per call, against the
#   same policies linked natively (settings parsed per call, and parsed once);
# - capsule build + hash (`cargo bench -p forge-capsule --bench pack`, 1 GiB generated
#   tree) against `openssl dgst -sha256` over the same files, and against Ray's own
#   `working_dir` packager (hash + zip, `ray` from PyPI in a venv under
#   target/bench/ray-venv, `tests/bench/ray_pack.py`) on the same tree.
#
# Not measured here (see the README): admission throughput (`tests/load/run.sh`, wrk)
# and dispatch at scale.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

RAY_VERSION=2.60.0
venv=target/bench/ray-venv
if ! "$venv/bin/python" -c "import ray" 2>/dev/null; then
  echo "==> ray $RAY_VERSION from PyPI into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "ray==$RAY_VERSION"
fi

echo "==> release builds"
cargo bench --no-run -p forge-policy-host --bench policy_chain
cargo bench --no-run -p forge-capsule --bench pack

echo "==> policy chain: warm and fresh instances, native baselines"
cargo bench -p forge-policy-host --bench policy_chain -- \
  --warm-up-time 1 --measurement-time 3 | tee -a "$out"

echo "==> capsule build + hash against openssl dgst -sha256 and Ray's packager (1 GiB tree)"
FORGE_BENCH_RSS=0 FORGE_BENCH_RAY_PYTHON="$PWD/$venv/bin/python" \
  cargo bench -p forge-capsule --bench pack | tee -a "$out"

echo
echo "==> $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
awk '
  $1 == "BENCH" {
    for (i = 3; i <= NF; i++) { split($i, kv, "="); v[$2 "." kv[1]] = kv[2] }
  }
  function us(x) { return sprintf("%.1f µs", x) }
  function yes(ok) { return ok ? "met" : "**missed**" }
  END {
    w50 = v["policy_chain.wasm-warm.p50_us"]; w99 = v["policy_chain.wasm-warm.p99_us"]
    f50 = v["policy_chain.wasm-fresh.p50_us"]; f99 = v["policy_chain.wasm-fresh.p99_us"]
    n50 = v["policy_chain.native.p50_us"]; n99 = v["policy_chain.native.p99_us"]
    o50 = v["policy_chain.native-parsed-once.p50_us"]; o99 = v["policy_chain.native-parsed-once.p99_us"]
    cap = v["capsule.assemble.mib_s"]; ssl = v["capsule.openssl.mib_s"]; ray = v["capsule.ray.mib_s"]
    if (w99 == "" || f99 == "" || n99 == "" || cap == "" || ssl == "" || ray == "") {
      print "missing figures: a benchmark did not report" > "/dev/stderr"; exit 1
    }
    print "| measure | p50 | p99 | ratio / figure | goal | |"
    print "| --- | --- | --- | --- | --- | --- |"
    printf "| 3-plugin chain, wasm, warm instances (default) | %s | %s | p99 %.1f× native | p99 ≤ 50 µs and ≤ 5× native p99 | %s |\n", us(w50), us(w99), w99 / n99, yes(w99 <= 50 && w99 <= 5 * n99)
    printf "| 3-plugin chain, wasm, fresh instance per call | %s | %s | p99 %.1f× native | p99 ≤ 130 µs | %s |\n", us(f50), us(f99), f99 / n99, yes(f99 <= 130)
    printf "| 3-plugin chain, native (settings parsed per call) | %s | %s | baseline | | |\n", us(n50), us(n99)
    printf "| 3-plugin chain, native (settings parsed once) | %s | %s | warm wasm p99 %.1f× this | | |\n", us(o50), us(o99), w99 / o99
    printf "| capsule build + hash, 1 GiB tree | | | %.0f MiB/s = %.0f %% of openssl (%.0f MiB/s) | ≥ 80 %% of openssl | %s |\n", cap, 100 * cap / ssl, ssl, yes(cap >= 0.8 * ssl)
    print "| admission review throughput | | | not measured here: `tests/load/run.sh` | ≥ 0.15× `/healthz` | not done |"
    print "| submit → RayJob, dispatcher pass at 10 000 queued | | | not measured here | ≥ 2 000 jobs/s; ≤ 50 ms/pass | not done |"
    printf "| capsule build + hash vs Ray `working_dir` packager (hash + zip), same tree | | | Ray %.0f MiB/s: capsule %.1f× faster | ≥ 3× faster | %s |\n", ray, cap / ray, yes(cap >= 3 * ray)
  }
' "$out"
