-- Hit scenario: every request asks for the same, already cached URL (the one on wrk's command line).
-- No response() callback, so wrk does not hand headers to Lua and the client stays as cheap as possible.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

setup = bench.setup
done = bench.done
