-- Memory scenario: requests each of TOTAL distinct URLs PREFIX<k> (k = 0 .. TOTAL-1) once, the keys striped
-- over wrk's threads. A thread that has sent all its keys asks for IDLE_PATH (an already cached URL, so a HIT)
-- until every one of its keys has been answered as a MISS; then it writes MARKER_DIR/done-<thread> and stops.
-- (wrk's main thread still sleeps for -d; run.sh sends it SIGINT once every thread's marker exists, and wrk then
-- prints its summary as usual.)
-- Args: TOTAL THREADS PREFIX IDLE_PATH [MARKER_DIR]
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

local total, stride, first, nextKey, mine, prefix, idlePath, markerDir
local received = 0
local finished = false

setup = bench.setup
done = bench.done

function init(args)
  total = tonumber(args[1]) or 100000
  stride = tonumber(args[2]) or 2
  prefix = args[3] or "/screens/fill/"
  idlePath = args[4] or "/screens/home"
  markerDir = args[5]
  first = bench.thread_id() - 1
  nextKey = first
  mine = 0
  if first < total then mine = math.floor((total - 1 - first) / stride) + 1 end
end

local started = false

function request()
  -- wrk calls request() once in the first thread's state before the run, only to check what it returns, and
  -- throws that request away. Thread 1's first call therefore returns the idle request, so no key is lost.
  if not started then
    started = true
    if bench.thread_id() == 1 then return wrk.format("GET", idlePath) end
  end
  local k = nextKey
  if k >= total then
    return wrk.format("GET", idlePath)
  end
  nextKey = nextKey + stride
  return wrk.format("GET", prefix .. k)
end

local function finish()
  if finished then return end
  finished = true
  if markerDir then
    local f = io.open(markerDir .. "/done-" .. bench.thread_id(), "w")
    if f then
      f:write(string.format("received=%d misses=%d hits=%d\n", received, misses, hits))
      f:close()
    end
  end
  wrk.thread:stop()
end

function response(status, headers, body)
  bench.count(status, headers)
  received = received + 1
  -- Unique keys on a fresh cache are misses and IDLE_PATH is a hit, so `misses` counts this thread's keys.
  -- The second bound only guards against a cache that labels responses otherwise.
  if misses >= mine or received >= mine + 200000 then
    finish()
  end
end
