-- Miss scenario: every request is a URL nobody asked before: /screens/bench/<run>-<thread>-<counter>?u=<random>.
-- Args: [run id] [path prefix, /screens/bench/ unless given: /pass/bench/ for the pass-through scenario]
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

local prefix
local counter = 0

setup = bench.setup
done = bench.done

function init(args)
  bench.seed()
  prefix = (args[2] or "/screens/bench/") .. (args[1] or tostring(os.time())) .. "-" .. bench.thread_id() .. "-"
end

function request()
  counter = counter + 1
  return wrk.format("GET", prefix .. counter .. "?u=" .. math.random(1, 1000000000))
end
