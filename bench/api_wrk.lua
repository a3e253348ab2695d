-- wrk script for bench-api's single creates (bench/api.py --wrk): POSTs a fresh schedule per request,
-- says "BENCH_DONE" after BENCH_COUNT responses (bench/api.py then stops wrk with SIGINT), and prints one
-- "BENCH ..." summary line that bench/api.py parses.
local start = tonumber(os.getenv("BENCH_START"))
local count = tonumber(os.getenv("BENCH_COUNT"))
local blob = os.getenv("BENCH_BLOB")
local callback = os.getenv("BENCH_CALLBACK")
local sent, answered = 0, 0

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")

function request()
  sent = sent + 1
  local body = string.format('{"fire_at":%d,"payload":{"order":%d,"note":"%s"},"callback":%s}',
    start + math.random(0, 3599), sent, blob, callback)
  return wrk.format(nil, "/v1/schedules", nil, body)
end

function response(status, headers, body)
  answered = answered + 1
  if answered == count then
    io.write("BENCH_DONE\n")
    io.stdout:flush()
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH %d %d %d %.3f %.3f\n", summary.requests,
    e.status + e.connect + e.read + e.write + e.timeout, summary.duration,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
