-- wrk script: the baseline (GET /healthz: no auth, no policy, no store).
function done(summary, latency, requests)
  io.write(string.format("RESULT requests=%d seconds=%.3f non2xx=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration / 1e6, summary.errors.status,
    latency:percentile(50), latency:percentile(99)))
end
