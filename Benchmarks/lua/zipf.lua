-- Mixed scenario: keys drawn from a Zipf distribution (rank r has weight 1/r^s) over N keys,
-- /screens/zipf/<rank>. Counts X-Cache so the hit ratio can be reported.
-- Args: [N=20000] [s=1.0] [prefix=/screens/zipf/]
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

local n, prefix
local cdf = {}

setup = bench.setup
done = bench.done

function init(args)
  bench.seed()
  n = tonumber(args[1]) or 20000
  local s = tonumber(args[2]) or 1.0
  prefix = args[3] or "/screens/zipf/"
  local sum = 0
  for r = 1, n do
    sum = sum + 1 / (r ^ s)
    cdf[r] = sum
  end
  for r = 1, n do
    cdf[r] = cdf[r] / sum
  end
end

local function rank()
  local u = math.random()
  local lo, hi = 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo
end

function request()
  return wrk.format("GET", prefix .. rank())
end

function response(status, headers, body)
  bench.count(status, headers)
end
