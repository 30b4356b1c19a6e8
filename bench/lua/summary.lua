-- Prints wrk's exact counters as one JSON line (SPINDLE_BENCH {...}) from
-- done(), so the lab never parses wrk's rounded human units. No request()
-- or response() hook: wrk stays at full speed.
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
