-- wrk script: dry-run admission reviews (POST /v1/admission/review).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("FORGE_TOKEN")
wrk.body = '{"name":"load","framework":"nemo-rl","entrypoint":"python3 train.py","pools":[{"name":"train","nodes":1,"gpusPerNode":1}]}'

function done(summary, latency, requests)
  local non2xx = summary.errors.status
  io.write(string.format("RESULT requests=%d seconds=%.3f non2xx=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration / 1e6, non2xx,
    latency:percentile(50), latency:percentile(99)))
end
