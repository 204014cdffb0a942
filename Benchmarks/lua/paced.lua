-- Latency scenario: the hit URL at a fixed pace per connection, so every target is measured at the same offered
-- load instead of at its own saturation (where the faster server also takes more of the client's CPU).
-- Args: [requests per second per connection]
-- wrk waits delay() milliseconds after each response before the next request, in whole milliseconds; the pause
-- owed is carried over (per wrk thread, whose connections share one Lua state), so 0.53 ms becomes 0, 1, 0, 1, ...
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

local gap_ms = 1
local owed_ms = 0

setup = bench.setup
done = bench.done

function init(args)
  local per_connection = tonumber(args[1])
  if not per_connection or per_connection <= 0 then
    error("paced.lua: the requests per second per connection must be a positive number, got " .. tostring(args[1]))
  end
  gap_ms = 1000 / per_connection
end

function delay()
  owed_ms = owed_ms + gap_ms
  local wait = math.floor(owed_ms)
  owed_ms = owed_ms - wait
  return wait
end
