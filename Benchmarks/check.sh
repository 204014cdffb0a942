#!/usr/bin/env bash
# Cheap CI check of the benchmark harness, without any load and without the proxy binary:
#   - bash -n on the scripts;
#   - the generated nginx configs pass `nginx -t` and the VCL compiles with `varnishd -C` (when those exist);
#   - the wrk Lua scripts parse (luajit or lua, when one exists);
#   - the Python tools parse, and report.py renders a sample result set ending with the required last line;
#   - the generated proxy config passes `sdui-proxy --check-config` when a binary happens to exist (BIN=...).
# Tools that are missing are skipped with a message; the script exits non-zero only on a real failure.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
# shellcheck source=lib/configs.sh
source "$BENCH_DIR/lib/configs.sh"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sdui-bench-check.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

failures=0
pass() { printf 'ok    %s\n' "$*"; }
skip() { printf 'skip  %s\n' "$*"; }
fail() {
    printf 'FAIL  %s\n' "$*"
    failures=$((failures + 1))
}

# --- shell syntax
for script in "$BENCH_DIR/run.sh" "$BENCH_DIR/check.sh" "$BENCH_DIR/lib/configs.sh"; do
    if bash -n "$script"; then pass "bash -n ${script#"$ROOT"/}"; else fail "bash -n ${script#"$ROOT"/}"; fi
done
if command -v shellcheck >/dev/null; then
    if shellcheck -S warning "$BENCH_DIR/run.sh" "$BENCH_DIR/check.sh" "$BENCH_DIR/lib/configs.sh"; then
        pass "shellcheck"
    else
        fail "shellcheck"
    fi
else
    skip "shellcheck (not installed)"
fi

# --- generated configs (the same generators run.sh uses)
mkdir -p "$TMP/www"
cp "$BENCH_DIR/fixtures/screen.json" "$TMP/www/screen.json"
gen_origin_conf "$TMP/origin" 18000 "$TMP/www" 2k
gen_nginx_conf "$TMP/nginx" 18081 18082 18084 18000 256m
gen_nginx_conf "$TMP/nginx-small" 18081 18082 18084 18000 8m
gen_vcl "$TMP/varnish/bench.vcl" 18000
gen_proxy_yaml "$TMP/proxy/sdui-proxy.yaml" 18080 19090 18000 256MiB

if command -v nginx >/dev/null; then
    for name in origin nginx nginx-small; do
        if out=$(nginx -t -p "$TMP/$name" -c "$TMP/$name/nginx.conf" -e "$TMP/$name/logs/error.log" 2>&1); then
            pass "nginx -t ($name)"
        else
            fail "nginx -t ($name): $out"
        fi
    done
else
    skip "nginx -t (nginx not installed)"
fi

if command -v varnishd >/dev/null; then
    # -j none: as root, varnishd would otherwise drop to the varnish user, who cannot read the 0700 temp dir.
    if out=$(varnishd -j none -C -f "$TMP/varnish/bench.vcl" -n "$TMP/varnish/instance" 2>&1 >/dev/null); then
        pass "varnishd -C (VCL compiles)"
    else
        fail "varnishd -C: $out"
    fi
else
    skip "varnishd -C (varnish not installed)"
fi

if [[ -n ${BIN:-} && -x ${BIN:-} ]]; then
    if out=$("$BIN" --check-config --config "$TMP/proxy/sdui-proxy.yaml" 2>&1); then
        pass "sdui-proxy --check-config"
    else
        fail "sdui-proxy --check-config: $out"
    fi
else
    skip "sdui-proxy --check-config (set BIN=path/to/sdui-proxy to include it)"
fi

# --- the fixture is a valid component of about 2 KB
if command -v python3 >/dev/null; then
    if python3 - "$BENCH_DIR/fixtures/screen.json" <<'EOF'; then
import json, os, sys
path = sys.argv[1]
data = json.load(open(path))
assert isinstance(data, dict) and isinstance(data.get("_beagleComponent_"), str), "no _beagleComponent_ at the root"
size = os.path.getsize(path)
assert 1500 <= size <= 3000, f"fixture is {size} bytes, expected about 2 KB"
EOF
        pass "fixtures/screen.json is a ~2 KB Beagle component"
    else
        fail "fixtures/screen.json"
    fi
fi

# --- Lua scripts parse
lua_checker=""
if command -v luajit >/dev/null; then
    lua_checker=luajit
elif command -v lua >/dev/null; then
    lua_checker=lua
fi
for script in "$BENCH_DIR"/lua/*.lua; do
    if [[ -z $lua_checker ]]; then
        skip "lua parse ${script#"$ROOT"/} (no luajit or lua)"
        continue
    fi
    if out=$("$lua_checker" -e "assert(loadfile('$script'))" 2>&1); then
        pass "$lua_checker parses ${script#"$ROOT"/}"
    else
        fail "$lua_checker ${script#"$ROOT"/}: $out"
    fi
done

# --- Python tools parse; report.py renders a sample and ends with the required line
if command -v python3 >/dev/null; then
    for tool in "$BENCH_DIR"/tools/*.py; do
        if out=$(python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$tool" 2>&1); then
            pass "python3 parses ${tool#"$ROOT"/}"
        else
            fail "python3 ${tool#"$ROOT"/}: $out"
        fi
    done
    sample=$TMP/results
    mkdir -p "$sample"
    {
        printf 'scenario\ttarget\tconns\tround\trequests\tduration_us\trps\tp50_us\tp99_us\terrors\tcpu_us\trss_kb\thits\tmisses\tother\tsteal_pct\tconn_split\n'
        for t in proxy nginx varnish; do
            for c in 16 64 256; do
                printf 'hit\t%s\t%s\t1\t100000\t10000000\t10000.0\t900\t3000\t0\t2000000\t30000\t0\t0\t0\t2.5\t%s\n' "$t" "$c" "$c"
            done
        done
        printf 'hit\tnginx-reuseport\t16\t1\t100000\t10000000\t10000.0\t900\t6000\t0\t2000000\t30000\t0\t0\t0\t2.5\t9/7\n'
        printf 'latency\tproxy\t16\t1\t300000\t10000000\t30000.0\t120\t400\t0\t2000000\t30000\t0\t0\t0\t0.1\n'
        printf 'latency\tnginx\t16\t1\t300000\t10000000\t30000.0\t150\t500\t0\t3000000\t30000\t0\t0\t0\t0.1\n'
        printf 'miss\tproxy\t64\t1\t50000\t10000000\t5000.0\t1000\t5000\t0\t3000000\t40000\t0\t0\t0\t2.5\n'
        printf 'miss\tnginx-nocache\t64\t1\t60000\t10000000\t6000.0\t900\t4000\t0\t2000000\t20000\t0\t0\t0\t2.5\n'
        printf 'pass\tproxy\t64\t1\t70000\t10000000\t7000.0\t1000\t5000\t0\t2800000\t40000\t0\t0\t0\t2.5\n'
        printf 'pass\tnginx-nocache\t64\t1\t100000\t10000000\t10000.0\t900\t4000\t0\t2000000\t20000\t0\t0\t0\t2.5\n'
        printf 'mixed\tproxy\t64\t1\t80000\t10000000\t8000.0\t900\t4000\t0\t2000000\t20000\t60000\t20000\t0\t2.5\n'
        printf 'speeds\tproxy\t64\t1\t40000\t10000000\t4000.0\t1000\t5000\t0\t1200000\t40000\t0\t0\t0\t2.5\n'
        printf 'speeds\tnginx-nocache\t64\t1\t80000\t10000000\t8000.0\t900\t4000\t0\t800000\t20000\t0\t0\t0\t2.5\n'
    } >"$sample/runs.tsv"
    printf 'target\tclients\tanswered\tok\torigin_requests\tx_cache\tfailures\nproxy\t1000\t1000\t1000\t1\tHIT 999, MISS 1\t-\n' >"$sample/stampede.tsv"
    printf 'target\tentries\tmisses\trss_before_kb\trss_after_kb\tpayload_bytes\nproxy\t100000\t100000\t20000\t400000\t2427\n' >"$sample/memory.tsv"
    {
        printf 'kind\ttarget\tround\trequests\tuser_instructions\tinstructions\tcycles\n'
        printf 'hit\tproxy\t1\t1000\t30000000\t45000000\t50000000\n'
        printf 'hit\tnginx\t1\t1000\t22000000\t50000000\t35000000\n'
        printf 'miss\tproxy\t1\t1000\t470000000\t510000000\t250000000\n'
        printf 'miss\tnginx-nocache\t1\t1000\t30000000\t60000000\t40000000\n'
    } >"$sample/instructions.tsv"
    {
        printf 'target\trestart\trequests\tuser_instructions\tuser_cycles\tkernel_instructions\tkernel_cycles\n'
        printf 'proxy\t1\t20000\t3000000000\t1200000000\t600000000\t1000000000\n'
        printf 'nginx-nocache\t1\t40000\t1000000000\t450000000\t1200000000\t800000000\n'
    } >"$sample/speeds.tsv"
    if out=$(python3 "$BENCH_DIR/tools/report.py" "$sample" 2>&1) &&
        [[ $(tail -n 1 <<<"$out") == "hit-cpu-per-request ratio vs nginx: 1.00" ]] &&
        grep -q '^| hit | sdui-proxy | 30,000 | 45,000 | 50,000 | 1.36 |$' <<<"$out" &&
        grep -q '^| sdui-proxy | 16 | 10,000 | 0.90 | 3.00 | 20.0 | 29.3 | 0 | 2.5 | 16 |$' <<<"$out" &&
        grep -q '^| nginx proxy_cache, reuseport | 16 | 10,000 | 0.90 | 6.00 | 20.0 | 29.3 | 0 | 2.5 | 9/7 |$' <<<"$out" &&
        grep -q '^| 16 | 1.00 | 1.00 | 1.00 | 1.00 | 0.50 | 1.00 | 1.00 | 1.00 | 1.00 |$' <<<"$out" &&
        grep -q '^| 1 | sdui-proxy | 4,000 | 30.0 | 150,000 | 60,000 | 30,000 | 50,000 |$' <<<"$out" &&
        grep -q '^| 16 | 0.80 | n/a | 0.80 | n/a |$' <<<"$out" &&
        grep -q '^| 64 | 0.70 | 2.00 |$' <<<"$out"; then
        pass "report.py renders a sample (steal, connection splits, the reuseport anchor, latency, instructions, speeds and pass-through tables included); last line is the hit CPU ratio"
    else
        fail "report.py: $out"
    fi
else
    skip "python3 checks (python3 not installed)"
fi

if ((failures > 0)); then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"
