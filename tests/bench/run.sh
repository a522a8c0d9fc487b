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
#   target/bench/ray-venv, `tests/bench/ray_pack.py`) on the same tree; then the
#   packer's peak RSS on a 2 GiB tree.
#
# - dispatch at scale (`cargo bench -p forge-gateway --features dev --bench dispatch`): dispatcher
#   passes over 10 000 queued jobs on 10 000 emulated nodes (cold, idle, after a team's
#   change, after a capacity change); then the console's pages on that state (size of
#   HTML + CSS + JS, server-side render time);
# - a simulated day of preemption (`cargo bench -p forge-gateway --bench preemption_day`):
#   1 000 mixed-priority jobs that checkpoint every 10 minutes, preempted with the
#   gateway's planner and notice against suspend-now (Kueue's way), same arrivals,
#   ten days of different draws;
# - the gang fit across fleets (`cargo bench -p forge-gateway --bench gang_fit`): one
#   pass's fit of 10 000 queued gangs on 10 000 nodes as one fleet, as three (any
#   fleet), and as three with every job pinned to one; one fleet is the baseline;
# - admission throughput and submit → RayJob (`tests/load/run.sh`, wrk): reviews and
#   submissions against the same run's `/healthz`, and reviews at a fixed 1 000 req/s
#   (oha, evenly spaced arrivals) for their latency under a steady load, next to /healthz
#   at the same rate;
# - tracing's cost (`tests/load/tracing.sh`): reviews with tracing off, on (untraced
#   requests: the hot path) and on with every review traced, alternated twice;
# - submit → RayJob on its own (`tests/load/drain.sh`): 12 000 jobs submitted, drained,
#   and the gateway process's CPU per job; then again with the API server in its own
#   process (`API=apart`), which splits that CPU between the gateway and the API server;
#   then with three fleets (`FLEETS=3`: the same nodes as three emulated clusters),
#   against the one-fleet run (issue 42: at least its rate).
# - real Ray in dev (`tests/bench/ray_dev.sh`): submit -> the driver's first output line
#   on a 2-machine gang, p50 over 5 rounds, against the same program on a bare 2-node
#   Ray started by hand; each node's start and memory, a 3-machine gang's memory.
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
bash tests/wasm-toolchain.sh
cargo bench --no-run -p forge-policy-host --bench policy_chain
cargo bench --no-run -p forge-capsule --bench pack
cargo bench --no-run -p forge-gateway --features dev --bench dispatch
cargo bench --no-run -p forge-gateway --bench preemption_day
cargo bench --no-run -p forge-gateway --bench gang_fit
cargo run --quiet --release -p forge-plugin-build --bin forge-plugin -- build \
  --target-dir target/plugins --out target/plugins/components \
  plugins/pool-series plugins/team-quota plugins/rwo-guard

echo "==> policy chain: warm and fresh instances, native baselines"
cargo bench -p forge-policy-host --bench policy_chain -- \
  --warm-up-time 1 --measurement-time 3 | tee -a "$out"

echo "==> capsule build + hash against openssl dgst -sha256 and Ray's packager (1 GiB tree), peak RSS (2 GiB tree)"
FORGE_BENCH_RAY_PYTHON="$PWD/$venv/bin/python" \
  cargo bench -p forge-capsule --bench pack | tee -a "$out"

echo "==> a simulated day of preemption: checkpoint-aware against suspend-now"
cargo bench -p forge-gateway --bench preemption_day | tee -a "$out"

echo "==> the gang fit on 10 000 nodes: one fleet against three"
cargo bench -p forge-gateway --bench gang_fit | tee -a "$out"

echo "==> dispatch at scale: 10 000 queued jobs, 10 000 nodes"
cargo bench -p forge-gateway --features dev --bench dispatch | tee -a "$out"

echo "==> admission reviews and submissions against /healthz (wrk)"
bash tests/load/run.sh | tee -a "$out"

echo "==> admission reviews with tracing off and on (a real OTLP receiver), alternated"
bash tests/load/tracing.sh | tee -a "$out"

echo "==> submit -> RayJob: 12 000 jobs submitted (oha), drained; the gateway's CPU per job"
bash tests/load/drain.sh | tee -a "$out"

echo "==> the same with the API server in its own process (forge-kubesim), as in a cluster"
API=apart bash tests/load/drain.sh | tee -a "$out"

echo "==> the same with three fleets (dev --fleets 3, the nodes split between them)"
FLEETS=3 bash tests/load/drain.sh | tee -a "$out"

echo "==> real Ray in dev: submit -> the driver's first line (2-machine gang, 5 rounds), node start and memory, bare Ray baseline"
bash tests/bench/ray_dev.sh 5 | tee -a "$out"

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
    l50 = v["policy_chain.wasm-warm-floor.p50_us"]; l99 = v["policy_chain.wasm-warm-floor.p99_us"]
    cap = v["capsule.assemble.mib_s"]; ssl = v["capsule.openssl.mib_s"]; ray = v["capsule.ray.mib_s"]
    if (w99 == "" || f99 == "" || n99 == "" || cap == "" || ssl == "" || ray == "") {
      print "missing figures: a benchmark did not report" > "/dev/stderr"; exit 1
    }
    print "| measure | p50 | p99 | ratio / figure | goal | |"
    print "| --- | --- | --- | --- | --- | --- |"
    printf "| 3-plugin chain, wasm, warm instances (default) | %s | %s | p99 %.1f× native | p99 ≤ 50 µs and ≤ 5× native p99 | %s |\n", us(w50), us(w99), w99 / n99, yes(w99 <= 50 && w99 <= 5 * n99)
    printf "| 3 warm links that read nothing (the floor of a call) | %s | %s | p99 %.1f× native | | |\n", us(l50), us(l99), l99 / n99
    printf "| 3-plugin chain, wasm, fresh instance per call | %s | %s | p99 %.1f× native | p99 ≤ 130 µs | %s |\n", us(f50), us(f99), f99 / n99, yes(f99 <= 130)
    printf "| 3-plugin chain, native (settings parsed per call) | %s | %s | baseline | | |\n", us(n50), us(n99)
    printf "| 3-plugin chain, native (settings parsed once) | %s | %s | warm wasm p99 %.1f× this | | |\n", us(o50), us(o99), w99 / o99
    printf "| capsule build + hash, 1 GiB tree | | | %.0f MiB/s = %.0f %% of openssl (%.0f MiB/s) | ≥ 80 %% of openssl | %s |\n", cap, 100 * cap / ssl, ssl, yes(cap >= 0.8 * ssl)
    hz = v["load.healthz_rps"]; rv = v["load.review_rps"]; rv99 = v["load.review_p99_us"]
    cps = v["load.created_per_s"]; subs = v["load.submit_rps"]
    idle50 = v["dispatch.idle_p50_ms"]; idle99 = v["dispatch.idle_p99_ms"]
    if (hz == "" || idle99 == "") {
      print "missing figures: the load or dispatch benchmark did not report" > "/dev/stderr"; exit 1
    }
    printf "| admission review throughput (wrk, 32 connections) | | %.1f ms | %.0f req/s = %.2f× `/healthz` (%.0f req/s) | ≥ 0.15× `/healthz` | %s |\n", rv99 / 1000, rv, rv / hz, hz, yes(rv >= 0.15 * hz)
    toff = v["tracing.off_rps"]; ton = v["tracing.on_rps"]; ttr = v["tracing.traced_rps"]
    printf "| admission reviews, tracing on (exported to a real OTLP receiver), untraced requests | | | %.0f req/s = %.2f× tracing off (%.0f req/s); every review traced: %.0f req/s = %.2f× | ≥ 0.9× tracing off | %s |\n", ton, ton / toff, toff, ttr, ttr / toff, yes(ton >= 0.9 * toff)
    fr = v["load.fixed_rate"]; frps = v["load.fixed_rps"]; f50 = v["load.fixed_p50_us"]; f99 = v["load.fixed_p99_us"]; fbad = v["load.fixed_non2xx"]; h99 = v["load.fixed_healthz_p99_us"]
    printf "| admission review at a fixed %d req/s (oha) | %.1f ms | %.1f ms | %.0f req/s served, %d not 2xx; `/healthz` at the same rate p99 %.2f ms | p99 ≤ 5 ms at 1 000 req/s | %s |\n", fr, f50 / 1000, f99 / 1000, frps, fbad, h99 / 1000, yes(f99 <= 5000 && frps >= 0.95 * fr && fbad == 0)
    printf "| submit → RayJob created, during 15 s of submissions (wrk) | | | %.0f jobs/s (submits %.0f req/s) | ≥ 2 000 jobs/s | %s |\n", cps, subs, yes(cps >= 2000)
    dps = v["drain.created_per_s"]
    printf "| submit → RayJob created, %d jobs submitted then drained (oha) | | | %.0f jobs/s (submits %.0f req/s); %.0f µs of the process'"'"'s CPU a job, emulated API server included; every job initializing after %.1f s (%.0f µs a job through then) | ≥ 2 000 jobs/s | %s |\n", v["drain.jobs"], dps, v["drain.submit_rps"], v["drain.cpu_us_per_job"], v["drain.settled_s"], v["drain.cpu_settled_us_per_job"], yes(dps >= 2000)
    fps = v["drain_fleets3.created_per_s"]
    printf "| the same, three fleets (each RayJob created in the fleet its gang fit chose) | | | %.0f jobs/s = %.2f× one fleet; %.0f µs of CPU a job | ≥ the one-fleet rate | %s |\n", fps, fps / dps, v["drain_fleets3.cpu_us_per_job"], yes(fps >= dps)
    aps = v["drain_apart.created_per_s"]
    printf "| the same, API server in its own process (as in a cluster) | | | %.0f jobs/s; CPU a job: gateway %.0f µs, API server %.0f µs | ≥ 2 000 jobs/s | %s |\n", aps, v["drain_apart.cpu_us_per_job"], v["drain_apart.api_cpu_us_per_job"], yes(aps >= 2000)
    pf = v["preemption.forge_lost_gpu_h"]; ps = v["preemption.suspend_lost_gpu_h"]
    if (v["preemption.ratio"] == "") { print "missing figures: the simulated day did not report" > "/dev/stderr"; exit 1 }
    printf "| a simulated day of preemption (%d days): GPU-hours lost a day, checkpoint-aware vs suspend-now | | | %.1f vs %.1f GPU-h = %.1f %% (days %.1f–%.1f %%; told every answer %.1f %%; %d vs %d preemptions; planner p99 %.1f µs) | ≤ 10 %% of suspend-now | %s |\n", v["preemption.days"], pf, ps, 100 * v["preemption.ratio"], 100 * v["preemption.ratio_best"], 100 * v["preemption.ratio_worst"], 100 * v["preemption.oracle_ratio"], v["preemption.forge_preemptions"], v["preemption.suspend_preemptions"], v["preemption.planner_p99_us"], yes(v["preemption.ratio"] <= 0.1)
    printf "| dispatcher pass, 10 000 queued on 10 000 nodes, nothing changed (found so: skipped) | %.2f ms | %.2f ms | cold pass %.0f ms, the pass reading its writes %.0f ms | ≤ 50 ms | %s |\n", idle50, idle99, v["dispatch.cold_ms"], v["dispatch.settle_ms"], yes(idle99 <= 50)
    printf "| the same, forced to decide the whole queue (the periodic full pass, every 30 s when nothing changed) | %.1f ms | %.1f ms | skipped pass p50 %.3f× this | ≤ 50 ms | %s |\n", v["dispatch.full_idle_p50_ms"], v["dispatch.full_idle_p99_ms"], idle50 / v["dispatch.full_idle_p50_ms"], yes(v["dispatch.full_idle_p99_ms"] <= 50)
    printf "| dispatcher pass after one job of a team ended (%d times) | %.0f ms | max %.0f ms | the first %.0f ms (%d dispatched in all) | grows with what changed | |\n", v["dispatch.team_changes"], v["dispatch.team_p50_ms"], v["dispatch.team_max_ms"], v["dispatch.team_ms"], v["dispatch.team_dispatched"]
    printf "| dispatcher pass after a capacity change (every job asked again) | | | %.0f ms | baseline of a full pass | |\n", v["dispatch.capacity_ms"]
    if (v["fit.one_p50_ms"] == "") { print "missing figures: the gang fit did not report" > "/dev/stderr"; exit 1 }
    printf "| gang fit of a pass, %d queued on %d nodes, three fleets (any) / three fleets (each job pinned) | %.1f / %.1f ms | max %.1f / %.1f ms | %.2f× / %.2f× one fleet (%.1f ms); placed %d / %d / %d | | |\n", v["fit.queued"], v["fit.nodes"], v["fit.three_p50_ms"], v["fit.pinned_p50_ms"], v["fit.three_max_ms"], v["fit.pinned_max_ms"], v["fit.three_vs_one"], v["fit.pinned_vs_one"], v["fit.one_p50_ms"], v["fit.three_placed"], v["fit.pinned_placed"], v["fit.one_placed"]
    ckb = v["console.worst_kb"]; cms = v["console.worst_ms"]
    if (ckb == "") { print "missing figures: the console pages did not report" > "/dev/stderr"; exit 1 }
    printf "| console pages (admin) with 10 000 queued on 10 000 nodes: jobs, capacity, a job | %.0f / %.0f / %.0f ms | max %.0f ms | largest page + CSS + JS %.1f KB (jobs %.1f, capacity %.1f, job %.1f) | ≤ 100 KB and ≤ 300 ms | %s |\n", v["console.jobs_p50_ms"], v["console.capacity_p50_ms"], v["console.job_p50_ms"], cms, ckb, v["console.jobs_kb"], v["console.capacity_kb"], v["console.job_kb"], yes(ckb <= 100 && cms <= 300)
    printf "| capsule build + hash vs Ray `working_dir` packager (hash + zip), same tree | | | Ray %.0f MiB/s: capsule %.1f× faster | ≥ 3× faster | %s |\n", ray, cap / ray, yes(cap >= 3 * ray)
    rf = v["ray_dev.first_p50_s"]; bf = v["ray_bare.first_p50_s"]
    if (rf == "" || bf == "") {
      print "missing figures: the real-Ray benchmark did not report" > "/dev/stderr"; exit 1
    }
    printf "| dev, real Ray: submit → driver'"'"'s first line, 2-machine gang | %.1f s | | max %.1f s; result %.1f s; bare 2-node Ray (ray start ×2 + ray job submit) %.1f s → %.1f× | ≤ 10 s | %s |\n", rf, v["ray_dev.first_max_s"], v["ray_dev.result_p50_s"], bf, rf / bf, yes(rf <= 10)
    printf "| dev, real Ray: a node, container start → Ready; its memory | %.1f s | | %.0f MiB PSS (%.0f MiB RSS); 3-machine gang %.0f MiB PSS | 3-machine gang < 2 GiB | %s |\n", v["ray_dev.node_start_p50_s"], v["ray_dev.node_pss_p50_mib"], v["ray_dev.node_rss_p50_mib"], v["ray_dev.gang3_pss_mib"], yes(v["ray_dev.gang3_pss_mib"] < 2048)
    rss = v["capsule.rss.mib"]
    printf "| capsule packer peak RSS, %.0f MiB tree | | | %.1f MiB | ≤ 64 MiB | %s |\n", v["capsule.rss.tree_mib"], rss, yes(rss != "" && rss <= 64)
  }
' "$out"
