-- Shared wrk helpers: thread numbering, per-thread counters and one machine-readable result line.
-- Each wrk script does `local bench = dofile(<this file>)` and wires wrk's callbacks to it.
--
-- The line printed by done() is parsed by run.sh / tools/report.py:
--   BENCH requests=N duration_us=N rps=F bytes=N errors=N connect=N read=N write=N status=N timeout=N
--         p50_us=N p90_us=N p99_us=N max_us=N hits=N misses=N other=N
local M = {}

local threads = {}

-- Main state: numbers the threads (1-based) before their init() runs.
function M.setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

-- Thread state: the thread's number, and a random seed that differs per thread and per run.
function M.thread_id()
  return wrk.thread:get("thread_id") or 1
end

function M.seed()
  local id = M.thread_id()
  math.randomseed(os.time() * 1000 + id * 7919 + math.floor((os.clock() * 1e6) % 100000))
end

-- Thread state: counts X-Cache values of responses (global variables so the main state can read them).
hits, misses, other = 0, 0, 0
function M.count(status, headers)
  local x = headers["X-Cache"] or headers["x-cache"] or headers["X-cache"]
  if x == "HIT" then
    hits = hits + 1
  elseif x == "MISS" then
    misses = misses + 1
  else
    other = other + 1
  end
end

function M.done(summary, latency, requests)
  local h, m, o = 0, 0, 0
  for _, t in ipairs(threads) do
    h = h + (t:get("hits") or 0)
    m = m + (t:get("misses") or 0)
    o = o + (t:get("other") or 0)
  end
  local e = summary.errors
  local errors = e.connect + e.read + e.write + e.status + e.timeout
  local secs = summary.duration / 1e6
  io.write(string.format(
    "BENCH requests=%d duration_us=%d rps=%.1f bytes=%d errors=%d connect=%d read=%d write=%d status=%d timeout=%d " ..
    "p50_us=%d p90_us=%d p99_us=%d max_us=%d hits=%d misses=%d other=%d\n",
    summary.requests, summary.duration, summary.requests / secs, summary.bytes, errors,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    h, m, o))
end

return M
