-- wrk script: tests/load/review.lua's dry-run admission reviews, each with a new
-- sampled W3C traceparent (so every review is traced and exported): the cost of a
-- trace someone asked for.
dofile("tests/load/review.lua")

local function hex(n)
  local t = {}
  for i = 1, n do t[i] = string.format("%x", math.random(0, 15)) end
  t[1] = "a" -- never all zeros
  return table.concat(t)
end

function request()
  wrk.headers["traceparent"] = "00-" .. hex(32) .. "-" .. hex(16) .. "-01"
  return wrk.format()
end
