#!/usr/bin/env bash
# Cheap CI check of the benchmark harness, without any load and without the proxy binary:
#   - bash -n on the scripts;
#   - the generated nginx configs (the hit-gzip scenario's gzip front and the h2-hit scenario's TLS + HTTP/2 front,
#     with a certificate made by the same openssl call run.sh uses, included) pass `nginx -t`, and the VCLs (plain
#     and gzip-storing) compile with `varnishd -C` (when those exist);
#   - the wrk Lua scripts parse (luajit or lua, when one exists); hit-gzip.lua asks for gzip;
#   - the Python tools parse, and report.py renders a sample result set ending with the required last line;
#   - the generated proxy config passes `sdui-proxy --check-config` when a binary happens to exist (BIN=...), and
#     so does its compression-off variant when that binary knows the `compression` section, and its TLS + HTTP/2
#     variant (h2-hit) when that binary knows `listen.tls`.
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
gen_nginx_conf "$TMP/nginx-gzip" 18081 18082 18084 18000 256m 18085
gen_vcl "$TMP/varnish/bench.vcl" 18000
gen_vcl "$TMP/varnish-gzip/bench.vcl" 18000 gzip
gen_proxy_yaml "$TMP/proxy/sdui-proxy.yaml" 18080 19090 18000 256MiB
PROXY_COMPRESSION='{ encodings: [] }' gen_proxy_yaml "$TMP/proxy-uncompressed/sdui-proxy.yaml" 18080 19090 18000 1024MiB
# The h2-hit scenario's fronts: a self-signed certificate made as run.sh makes it, nginx's `listen ... ssl http2`
# server block, the proxy's TLS + HTTP/2 listener.
tls_cert=""
if command -v openssl >/dev/null; then
    if gen_tls_cert "$TMP/tls" && [[ -s $TMP/tls/cert.pem && -s $TMP/tls/key.pem ]]; then
        tls_cert=$TMP/tls/cert.pem
        if openssl x509 -in "$tls_cert" -noout -ext subjectAltName 2>/dev/null | grep -q 'IP Address:127.0.0.1' &&
            openssl x509 -in "$tls_cert" -noout -text 2>/dev/null | grep -q 'prime256v1'; then
            pass "gen_tls_cert: self-signed P-256 certificate naming 127.0.0.1"
        else
            fail "gen_tls_cert: the certificate is not P-256 or does not name IP 127.0.0.1"
        fi
    else
        fail "gen_tls_cert: openssl made no certificate"
    fi
else
    skip "TLS certificate and the h2-hit configs (openssl not installed)"
fi
if [[ -n $tls_cert ]]; then
    gen_nginx_conf "$TMP/nginx-h2" 18081 18082 18084 18000 256m "" 18087 "$tls_cert" "$TMP/tls/key.pem"
    gen_proxy_yaml "$TMP/proxy-h2/sdui-proxy.yaml" 18086 19091 18000 256MiB "$tls_cert" "$TMP/tls/key.pem"
    # The TLS + HTTP/2 server block: on its own port, with the cache the other fronts use; nowhere else.
    h2_server=$(sed -n '/listen 127.0.0.1:18087 /,/^    }/p' "$TMP/nginx-h2/nginx.conf")
    missing=""
    for directive in 'listen 127.0.0.1:18087 ssl http2 backlog=4096;' "ssl_certificate     $tls_cert;" \
        "ssl_certificate_key $TMP/tls/key.pem;" 'http2_max_concurrent_streams 256;' 'proxy_cache sdui;' \
        'proxy_cache_key "$request_uri|$http_beagle_platform";'; do
        grep -qF "$directive" <<<"$h2_server" || missing+=" '$directive'"
    done
    if [[ -z $missing ]] && ! grep -q 'ssl' "$TMP/nginx/nginx.conf" && ! grep -q 'http2 on;' "$TMP/nginx-h2/nginx.conf"; then
        pass "nginx h2 front: listen ... ssl http2 (nginx 1.22 syntax) with the certificate, in front of proxy_cache, only when asked"
    else
        fail "nginx h2 front: missing${missing:- nothing}, or TLS in the plain config, or 1.25's 'http2 on;'"
    fi
    want_listen="listen: { host: 127.0.0.1, port: 18086, tls: { certificate: \"$tls_cert\", privateKey: \"$TMP/tls/key.pem\" }, http2: true, http2Limits: { maxConcurrentStreams: 256 } }"
    if grep -qxF "$want_listen" "$TMP/proxy-h2/sdui-proxy.yaml" && grep -qx 'listen: { host: 127.0.0.1, port: 18080 }' "$TMP/proxy/sdui-proxy.yaml"; then
        pass "proxy config: TLS + HTTP/2 listener (certificate, key, http2, maxConcurrentStreams) only in the h2 variant"
    else
        fail "proxy config: the h2 variant's listen line is not '$want_listen' (or the plain one has TLS)"
    fi
fi

# The hit-gzip scenario's nginx: gzip at level 1 on its own port, identity asked of the origin; the others without it.
gzip_server=$(sed -n '/listen 127.0.0.1:18085 /,/^    }/p' "$TMP/nginx-gzip/nginx.conf")
missing=""
for directive in 'gzip on;' 'gzip_comp_level 1;' 'gzip_types application/json;' 'gzip_proxied any;' \
    'proxy_cache sdui;' 'proxy_set_header Accept-Encoding "";'; do
    grep -qF "$directive" <<<"$gzip_server" || missing+=" '$directive'"
done
if [[ -z $missing ]] && ! grep -q 'gzip' "$TMP/nginx/nginx.conf"; then
    pass "nginx gzip front: gzip level 1 for application/json in front of proxy_cache on its own port, only when asked"
else
    fail "nginx gzip front: missing${missing:- nothing}, or gzip in the plain config"
fi
if grep -q 'set beresp.do_gzip = true;' "$TMP/varnish-gzip/bench.vcl" && ! grep -q 'do_gzip' "$TMP/varnish/bench.vcl"; then
    pass "gzip-storing VCL sets beresp.do_gzip, the plain one does not"
else
    fail "gzip-storing VCL: beresp.do_gzip not where expected"
fi
if grep -qx 'compression: { encodings: \[\] }' "$TMP/proxy-uncompressed/sdui-proxy.yaml" &&
    ! grep -q '^compression:' "$TMP/proxy/sdui-proxy.yaml"; then
    pass "proxy config: compression off only in the compression-off variant (the default config has no such section)"
else
    fail "proxy config: compression section not where expected"
fi

if command -v nginx >/dev/null; then
    nginx_names="origin nginx nginx-small nginx-gzip"
    [[ -z $tls_cert ]] || nginx_names+=" nginx-h2"
    for name in $nginx_names; do
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
    for name in varnish varnish-gzip; do
        if out=$(varnishd -j none -C -f "$TMP/$name/bench.vcl" -n "$TMP/$name/instance" 2>&1 >/dev/null); then
            pass "varnishd -C ($name VCL compiles)"
        else
            fail "varnishd -C ($name): $out"
        fi
    done
else
    skip "varnishd -C (varnish not installed)"
fi

if [[ -n ${BIN:-} && -x ${BIN:-} ]]; then
    if out=$("$BIN" --check-config --config "$TMP/proxy/sdui-proxy.yaml" 2>&1); then
        pass "sdui-proxy --check-config"
    else
        fail "sdui-proxy --check-config: $out"
    fi
    # The compression-off variant (memory scenario) needs a binary that knows the section: one that refuses it as
    # an unknown key predates store-time compression, and the variant is skipped; any other refusal is a failure.
    if out=$("$BIN" --check-config --config "$TMP/proxy-uncompressed/sdui-proxy.yaml" 2>&1); then
        pass "sdui-proxy --check-config (compression off)"
    elif grep -q 'compression: unknown key' <<<"$out"; then
        skip "sdui-proxy --check-config (compression off): skipped: binary without compression support"
    else
        fail "sdui-proxy --check-config (compression off): $out"
    fi
    # The TLS + HTTP/2 variant (h2-hit) needs a binary that knows listen.tls (it reads the certificate files too).
    if [[ -z $tls_cert ]]; then
        skip "sdui-proxy --check-config (TLS + HTTP/2): no certificate (openssl missing)"
    elif out=$("$BIN" --check-config --config "$TMP/proxy-h2/sdui-proxy.yaml" 2>&1); then
        pass "sdui-proxy --check-config (TLS + HTTP/2)"
    elif grep -qE 'listen(\.tls)?: unknown key|listen\.(tls|http2|http2Limits)' <<<"$out" && grep -q 'unknown key' <<<"$out"; then
        skip "sdui-proxy --check-config (TLS + HTTP/2): skipped: binary without listen.tls support"
    else
        fail "sdui-proxy --check-config (TLS + HTTP/2): $out"
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
# Without a response() callback wrk builds the request once from wrk.headers, so that is where gzip must be asked for.
if grep -qE '^wrk\.headers\["Accept-Encoding"\] = "gzip"$' "$BENCH_DIR/lua/hit-gzip.lua" &&
    ! grep -qE '^function (request|response)' "$BENCH_DIR/lua/hit-gzip.lua"; then
    pass "lua/hit-gzip.lua asks for gzip in wrk.headers, no request() or response() callback"
else
    fail "lua/hit-gzip.lua does not set wrk.headers[\"Accept-Encoding\"] = \"gzip\" (or has a per-request callback)"
fi

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
        printf 'scenario\ttarget\tconns\tround\trequests\tduration_us\trps\tp50_us\tp99_us\terrors\tcpu_us\trss_kb\thits\tmisses\tother\tsteal_pct\tconn_split\tbytes\tsys_us\n'
        for t in proxy nginx varnish; do
            for c in 16 64 256; do
                printf 'hit\t%s\t%s\t1\t100000\t10000000\t10000.0\t900\t3000\t0\t2000000\t30000\t0\t0\t0\t2.5\t%s\n' "$t" "$c" "$c"
            done
        done
        printf 'hit\tnginx-reuseport\t16\t1\t100000\t10000000\t10000.0\t900\t6000\t0\t2000000\t30000\t0\t0\t0\t2.5\t9/7\n'
        # Gzip hits, with wrk's bytes (the rows above have none: a results file from before the column still renders).
        printf 'hit-gzip\tproxy\t64\t1\t100000\t10000000\t9500.0\t900\t3000\t0\t2100000\t30000\t0\t0\t0\t2.5\t64\t120000000\n'
        printf 'hit-gzip\tnginx-gzip\t64\t1\t50000\t10000000\t5000.0\t1900\t6000\t0\t1500000\t30000\t0\t0\t0\t2.5\t64\t64000000\n'
        printf 'hit-gzip\tvarnish-gzip\t64\t1\t80000\t10000000\t8000.0\t1200\t4000\t0\t2400000\t30000\t0\t0\t0\t2.5\t64\t100000000\n'
        printf 'latency\tproxy\t16\t1\t300000\t10000000\t30000.0\t120\t400\t0\t2000000\t30000\t0\t0\t0\t0.1\n'
        printf 'latency\tnginx\t16\t1\t300000\t10000000\t30000.0\t150\t500\t0\t3000000\t30000\t0\t0\t0\t0.1\n'
        printf 'miss\tproxy\t64\t1\t50000\t10000000\t5000.0\t1000\t5000\t0\t3000000\t40000\t0\t0\t0\t2.5\tn/a\t-\t1000000\n'
        printf 'miss\tnginx-nocache\t64\t1\t60000\t10000000\t6000.0\t900\t4000\t0\t2000000\t20000\t0\t0\t0\t2.5\tn/a\t-\t1200000\n'
        printf 'miss\tproxy-uncompressed\t64\t1\t55000\t10000000\t5500.0\t1000\t5000\t0\t2000000\t40000\t0\t0\t0\t2.5\n'
        printf 'miss\tnginx\t64\t1\t40000\t10000000\t4000.0\t1200\t6000\t0\t2400000\t20000\t0\t0\t0\t2.5\n'
        printf 'miss\tvarnish\t64\t1\t50000\t10000000\t5000.0\t1100\t5000\t0\t2500000\t20000\t0\t0\t0\t2.5\n'
        printf 'pass\tproxy\t64\t1\t70000\t10000000\t7000.0\t1000\t5000\t0\t2800000\t40000\t0\t0\t0\t2.5\n'
        printf 'pass\tnginx-nocache\t64\t1\t100000\t10000000\t10000.0\t900\t4000\t0\t2000000\t20000\t0\t0\t0\t2.5\n'
        printf 'mixed\tproxy\t64\t1\t80000\t10000000\t8000.0\t900\t4000\t0\t2000000\t20000\t60000\t20000\t0\t2.5\n'
        printf 'speeds\tproxy\t64\t1\t40000\t10000000\t4000.0\t1000\t5000\t0\t1200000\t40000\t0\t0\t0\t2.5\n'
        printf 'speeds\tnginx-nocache\t64\t1\t80000\t10000000\t8000.0\t900\t4000\t0\t800000\t20000\t0\t0\t0\t2.5\n'
        # HTTP/2 hits over TLS (h2load: streams in all in the conns column, no X-Cache counts).
        for c in 16 64 256; do
            printf 'h2-hit\tproxy-h2\t%s\t1\t100000\t10000000\t11000.0\t900\t2700\t0\t2000000\t30000\t-\t-\t-\t2.5\t4\t260000000\n' "$c"
            printf 'h2-hit\tnginx-h2\t%s\t1\t100000\t10000000\t10000.0\t900\t3000\t0\t2500000\t30000\t-\t-\t-\t2.5\t3/1\t270000000\n' "$c"
        done
    } >"$sample/runs.tsv"
    printf 'h2_clients=4\nh2_handshakes=1000\n' >"$sample/meta.txt"
    {
        printf 'target\tround\tconnections\tsucceeded\terrors\tduration_us\thandshakes_per_s\tcpu_us\tsteal_pct\ttls\tcipher\tkey\n'
        printf 'proxy-h2\t1\t1000\t1000\t0\t1500000\t666.7\t400000\t2.0\tTLSv1.3\tTLS_AES_128_GCM_SHA256\tX25519\n'
        printf 'nginx-h2\t1\t1000\t1000\t0\t1250000\t800.0\t500000\t2.0\tTLSv1.3\tTLS_AES_128_GCM_SHA256\tX25519\n'
    } >"$sample/h2-handshakes.tsv"
    printf 'target\tclients\tanswered\tok\torigin_requests\tx_cache\tfailures\nproxy\t1000\t1000\t1000\t1\tHIT 999, MISS 1\t-\n' >"$sample/stampede.tsv"
    {
        printf 'target\tentries\tmisses\trss_before_kb\trss_after_kb\tpayload_bytes\n'
        printf 'proxy-uncompressed\t100000\t100000\t20000\t300000\t2427\n'
        printf 'proxy\t100000\t100000\t20000\t400000\t2427\n'
    } >"$sample/memory.tsv"
    {
        printf 'target\tstatus\tx_cache\tcontent_encoding\tgzip_body_bytes\tcontent_length\tvary\tgunzipped_equals_fixture\n'
        printf 'proxy\t200\tHIT\tgzip\t880\t880\tAccept-Encoding\tbytes\n'
        printf 'nginx-gzip\t200\tHIT\tgzip\t962\tchunked\tAccept-Encoding\tbytes\n'
    } >"$sample/gzip-check.tsv"
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
        [[ $(tail -n 2 <<<"$out" | head -n 1) == "gzip-hit-cpu-per-request ratio vs nginx gzip: 0.70" ]] &&
        [[ $(tail -n 3 <<<"$out" | head -n 1) == "h2-hit-cpu-per-request ratio vs nginx h2: 0.80" ]] &&
        grep -q '^| sdui-proxy, TLS + h2 | 64 | 11,000 | 0.90 | 2.70 | 20.0 | 29.3 | 2,600 | 0 | 2.5 | 4 |$' <<<"$out" &&
        grep -q '^| 64 | 16 | 0.80 | yes | 1.10 | 0.90 |$' <<<"$out" &&
        grep -q '^| nginx proxy_cache, TLS + h2 | 800 | 500.0 | 1,000 | 1 | 0 | TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 |$' <<<"$out" &&
        grep -q '^- handshakes: proxy ÷ nginx h2: handshakes/s 0.83, CPU/handshake 0.80$' <<<"$out" &&
        grep -q '^| sdui-proxy | 64 | 9,500 | 0.90 | 3.00 | 21.0 | 29.3 | 1,200 | 0 | 2.5 | 64 |$' <<<"$out" &&
        grep -q '^| 64 | 0.70 | \*\*no\*\* | 1.90 | 0.50 | 0.70 | 1.19 |$' <<<"$out" &&
        grep -q '^| 64 | 20.0 | 21.0 | 1.05 | 10,000 | 9,500 | 0.95 | yes | n/a | 1,200 |$' <<<"$out" &&
        grep -q '^| nginx proxy_cache + gzip (level 1) | HIT | gzip | 962 | chunked | Accept-Encoding | bytes |$' <<<"$out" &&
        grep -q '^- compression off: RSS per entry 1.18× the payload, target ≤ 1.20×: yes$' <<<"$out" &&
        grep -q '^- compression on ÷ off: RSS per entry 1.36×$' <<<"$out" &&
        grep -q '^| hit | sdui-proxy | 30,000 | 45,000 | 50,000 | 1.36 |$' <<<"$out" &&
        grep -q '^| sdui-proxy | 16 | 10,000 | 0.90 | 3.00 | 20.0 | 29.3 | 0 | 2.5 | 16 |$' <<<"$out" &&
        grep -q '^| nginx proxy_cache, reuseport | 16 | 10,000 | 0.90 | 6.00 | 20.0 | 29.3 | 0 | 2.5 | 9/7 |$' <<<"$out" &&
        grep -q '^| 16 | 1.00 | 1.00 | 1.00 | 1.00 | 0.50 | 1.00 | 1.00 | 1.00 | 1.00 |$' <<<"$out" &&
        grep -q '^| 1 | sdui-proxy | 4,000 | 30.0 | 150,000 | 60,000 | 30,000 | 50,000 |$' <<<"$out" &&
        grep -q '^| 16 | 0.80 | n/a | 0.80 | n/a |$' <<<"$out" &&
        grep -q '^| 64 | 1.09 | yes | 1.38 | yes | 1.10 | yes | 0.92 |$' <<<"$out" &&
        grep -q '^| 64 | 1.80 | \*\*no\*\* | 1.25 | yes | 1.00 | yes | 0.83 |$' <<<"$out" &&
        grep -q '^| 64 | 2.00 | \*\*no\*\* | 0.70 |$' <<<"$out" &&
        grep -q '^| sdui-proxy | 64 | 5,000 | 1.00 | 5.00 | 60.0 | 20.0 | 39.1 | 0 | 2.5 |$' <<<"$out" &&
        grep -q '^| nginx (no cache) | 64 | 6,000 | 0.90 | 4.00 | 33.3 | 20.0 | 19.5 | 0 | 2.5 |$' <<<"$out"; then
        pass "report.py renders a sample (steal, connection splits, the reuseport anchor, latency, instructions, speeds, misses against their targets with and without compression and with their system time, pass-through against its target, gzip-hit, h2-hit with handshakes and both memory rows included); last line is the hit CPU ratio"
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
