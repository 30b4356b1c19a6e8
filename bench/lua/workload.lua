-- Seed 002: every request asks the workload endpoint for a random delay and
-- bucket: GET /work?delay=D&bucket=B&hold=H, D uniform in [DMIN, DMAX], B
-- uniform in [0, BUCKETS), H fixed (units of work inside the bucket lock).
-- "close" sends Connection: close, so each request is a new connection (the
-- seed's thread-per-request case really creates a thread per request).
-- Arguments (after --): DMIN DMAX BUCKETS [close|keepalive] [HOLD]
local dmin, dmax, nbuckets, close, hold = 1, 3, 128, true, 0

init = function(args)
  dmin = tonumber(args[1] or dmin)
  dmax = tonumber(args[2] or dmax)
  nbuckets = tonumber(args[3] or nbuckets)
  close = args[4] ~= "keepalive"
  hold = tonumber(args[5] or hold)
  math.randomseed(os.time() + (tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 100000))
end

request = function()
  local path = string.format("/work?delay=%d&bucket=%d&hold=%d", math.random(dmin, dmax),
                             math.random(0, nbuckets - 1), hold)
  local headers = close and { ["Connection"] = "close" } or {}
  return wrk.format("GET", path, headers)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'SPINDLE_BENCH {"requests": %d, "bytes": %d, "duration_us": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency": {"mean": %.1f, "stdev": %.1f, "max": %d, "p50": %d, "p90": %d, "p99": %d}}\n',
    summary.requests, summary.bytes, summary.duration,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99)))
end
