-- Gzip hit scenario: the hit scenario's request, cached URL and all, sent with Accept-Encoding: gzip, so each
-- target answers from its gzip form (the proxy's and Varnish's stored one; nginx compresses at every hit).
-- Like hit.lua, no response() callback: wrk builds the request once and hands no headers to Lua. Whether the
-- answers were gzip is checked by run.sh before the load (one curl per target) and after it (bytes per response,
-- the BENCH line's bytes / requests, must be under the identity body's size).
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

wrk.headers["Accept-Encoding"] = "gzip"

setup = bench.setup
done = bench.done
