-- wrk script: dry-run admission reviews (POST /v1/admission/review).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("FORGE_TOKEN")
-- The body is tests/load/review.json, which the fixed-rate run (hey) sends too.
local f = assert(io.open("tests/load/review.json", "r"))
wrk.body = f:read("*a")
f:close()

function done(summary, latency, requests)
  local non2xx = summary.errors.status
  io.write(string.format("RESULT requests=%d seconds=%.3f non2xx=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration / 1e6, non2xx,
    latency:percentile(50), latency:percentile(99)))
end
