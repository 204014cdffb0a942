#!/usr/bin/env bash
# Load benchmark for sdui-proxy against two anchors, nginx proxy_cache and Varnish, all in front of one static
# nginx origin, all on 127.0.0.1. See Benchmarks/README.md for what is measured and for every knob.
#
#   Benchmarks/run.sh                                   # everything, defaults (≈ 22 min)
#   ROUNDS=1 DURATION=3 SCENARIOS="hit" Benchmarks/run.sh
#   SKIP_BUILD=1 BIN=/path/to/sdui-proxy Benchmarks/run.sh
#   SCENARIOS=instructions Benchmarks/run.sh            # CPU instructions per hit and per miss (perf stat)
#   SCENARIOS=speeds Benchmarks/run.sh                  # miss rates across origin restarts (the two speeds)
#   SCENARIOS=pass Benchmarks/run.sh                    # pass-through (a bypass route) against nginx without a cache
#   SCENARIOS="hit hit-gzip" Benchmarks/run.sh          # gzip hits (stored gzip) against identity hits and nginx's gzip
#   SCENARIOS=h2-hit Benchmarks/run.sh                  # hits over TLS + HTTP/2 (h2load) against nginx's TLS + h2 front
#   MISS_ACCEPT_ENCODING="gzip, deflate, br" SCENARIOS=miss Benchmarks/run.sh   # misses from clients that take codings
#
# stdout carries only the final report (markdown); progress goes to stderr. The last line on stdout is always
#   hit-cpu-per-request ratio vs nginx: X.XX
# and, when h2-hit ran, `h2-hit-cpu-per-request ratio vs nginx h2: X.XX` comes a line or two before it.
# Every server this script starts runs from its own config in Benchmarks/.work and is stopped by PID on exit,
# error or Ctrl-C. It never touches system services.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
# shellcheck source=lib/configs.sh
source "$BENCH_DIR/lib/configs.sh"

# ---- knobs -------------------------------------------------------------------------------------------------
SCENARIOS=${SCENARIOS:-"hit hit-gzip latency miss mixed stampede memory"}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
DURATION=${DURATION%s}
CONNECTIONS=${CONNECTIONS:-"16 64 256"}
WRK_THREADS=${WRK_THREADS:-2}
WARMUP=${WARMUP:-2}
WARMUP=${WARMUP%s}
HIT_TARGETS=${HIT_TARGETS:-"proxy nginx nginx-reuseport varnish"}
HIT_PATH=${HIT_PATH:-/screens/home}
GZIP_HIT_TARGETS=${GZIP_HIT_TARGETS:-"proxy nginx-gzip varnish-gzip"}
GZIP_HIT_CONNECTIONS=${GZIP_HIT_CONNECTIONS:-$CONNECTIONS}
CACHE_MB=${CACHE_MB:-256}
LATENCY_TARGETS=${LATENCY_TARGETS:-"proxy nginx varnish"}
LATENCY_RATE=${LATENCY_RATE:-30000}
MISS_CONNECTIONS=${MISS_CONNECTIONS:-$CONNECTIONS}
MISS_TARGETS=${MISS_TARGETS:-"proxy proxy-uncompressed nginx-nocache nginx varnish"}
# Sent as Accept-Encoding with every miss when set, as apps send it ("gzip, deflate, br" for iOS): the proxy's
# default then compresses each miss in the coding its client takes. Unset, wrk sends none, and nothing is compressed.
MISS_ACCEPT_ENCODING=${MISS_ACCEPT_ENCODING:-}
# More wrk arguments for the load of the scenario running (set by a scenario, e.g. a header).
WRK_EXTRA=()
PASS_CONNECTIONS=${PASS_CONNECTIONS:-$CONNECTIONS}
PASS_TARGETS=${PASS_TARGETS:-"proxy nginx-nocache"}
MIXED_TARGETS=${MIXED_TARGETS:-"proxy nginx varnish"}
MIXED_CONNECTIONS=${MIXED_CONNECTIONS:-64}
MIXED_KEYS=${MIXED_KEYS:-20000}
MIXED_CACHE_MB=${MIXED_CACHE_MB:-8}
ZIPF_S=${ZIPF_S:-1.0}
STAMPEDE_TARGETS=${STAMPEDE_TARGETS:-"proxy nginx varnish"}
STAMPEDE_CLIENTS=${STAMPEDE_CLIENTS:-1000}
ORIGIN_SLOW_RATE=${ORIGIN_SLOW_RATE:-2k}
MEMORY_TARGETS=${MEMORY_TARGETS:-"proxy-uncompressed proxy varnish"}
MEMORY_ENTRIES=${MEMORY_ENTRIES:-100000}
MEMORY_CACHE_MB=${MEMORY_CACHE_MB:-1024}
MEMORY_TIMEOUT=${MEMORY_TIMEOUT:-180}
INSTRUCTION_TARGETS=${INSTRUCTION_TARGETS:-"proxy nginx"}
INSTRUCTION_CONNECTIONS=${INSTRUCTION_CONNECTIONS:-64}
SPEED_RESTARTS=${SPEED_RESTARTS:-6}
SPEED_TARGETS=${SPEED_TARGETS:-"proxy nginx-nocache"}
SPEED_CONNECTIONS=${SPEED_CONNECTIONS:-64}
H2_TARGETS=${H2_TARGETS:-"proxy-h2 nginx-h2"}
H2_STREAMS=${H2_STREAMS:-"16 64 256"}
H2_CLIENTS=${H2_CLIENTS:-4}
H2_THREADS=${H2_THREADS:-$WRK_THREADS}
H2_MAX_STREAMS=${H2_MAX_STREAMS:-256}
H2_HANDSHAKES=${H2_HANDSHAKES:-1000}
SKIP_INSTALL=${SKIP_INSTALL:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-3600}
SCRATCH_PATH=${SCRATCH_PATH:-$ROOT/.build-bench}
BIN=${BIN:-}
WORK_DIR=${WORK_DIR:-$BENCH_DIR/.work}
ORIGIN_PORT=${ORIGIN_PORT:-18000}
PROXY_PORT=${PROXY_PORT:-18080}
PROXY_ADMIN_PORT=${PROXY_ADMIN_PORT:-19090}
NGINX_PORT=${NGINX_PORT:-18081}
NGINX_NOCACHE_PORT=${NGINX_NOCACHE_PORT:-18082}
VARNISH_PORT=${VARNISH_PORT:-18083}
NGINX_REUSEPORT_PORT=${NGINX_REUSEPORT_PORT:-18084}
NGINX_GZIP_PORT=${NGINX_GZIP_PORT:-18085}
PROXY_H2_PORT=${PROXY_H2_PORT:-18086}
PROXY_H2_ADMIN_PORT=${PROXY_H2_ADMIN_PORT:-19091}
NGINX_H2_PORT=${NGINX_H2_PORT:-18087}

SCENARIO_PID=
PROXY_COMPRESSION_SUPPORT=unknown # yes, no or refused: set by probe_proxy_compression
PROXY_COMPRESSION_DETAIL="not probed"
RUN_ID=$(date +%Y%m%d-%H%M%S)-$$
RUN_DIR=$WORK_DIR/run
RESULTS=$WORK_DIR/results/$RUN_ID
REGISTRY=$RUN_DIR/pids
FIXTURE=$BENCH_DIR/fixtures/screen.json
LUA_DIR=$BENCH_DIR/lua
# The self-signed certificate and key of the TLS + HTTP/2 fronts (h2-hit scenario), made afresh by each run.
TLS_DIR=$RUN_DIR/tls
CLK_TCK=$(getconf CLK_TCK)

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}
note() { printf '%s\n' "$*" >>"$RESULTS/notes.txt"; }

# ---- process registry: every server we start, "name pid" per line; stop_* only ever kills those PIDs -------
register() { printf '%s %s\n' "$1" "$2" >>"$REGISTRY"; }
registered_pid() { awk -v n="$1" '$1 == n { p = $2 } END { if (p) print p }' "$REGISTRY" 2>/dev/null || true; }
unregister() {
    local tmp=$REGISTRY.tmp
    awk -v n="$1" '$1 != n' "$REGISTRY" >"$tmp" 2>/dev/null || true
    mv "$tmp" "$REGISTRY"
}

# The given PIDs (those alive) and all their descendants, one per line.
tree_pids() {
    ps -e -o pid=,ppid= | awk -v roots="$*" '
        BEGIN { n = split(roots, r, " ") }
        { parent[$1] = $2; alive[$1] = 1 }
        END {
            for (i = 1; i <= n; i++) if (r[i] in alive) keep[r[i]] = 1
            do {
                changed = 0
                for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; changed = 1 }
            } while (changed)
            for (p in keep) print p
        }'
}

# Whether PID is still a server of ours: every one we start names a path under $RUN_DIR on its command line
# (nginx -p, varnishd -n, sdui-proxy --config), so a recycled PID is never mistaken for ours.
is_ours() {
    local cmdline
    cmdline=$({ tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null) || return 1
    [[ $cmdline == *"$RUN_DIR/"* ]]
}

stop_server() {
    local name=$1 pid tree
    pid=$(registered_pid "$name")
    [[ -n $pid ]] || return 0
    if ! is_ours "$pid"; then
        unregister "$name"
        return 0
    fi
    tree=$(tree_pids "$pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        local waited=0
        while kill -0 "$pid" 2>/dev/null && ((waited < 150)); do
            sleep 0.1
            waited=$((waited + 1))
        done
    fi
    # Whatever of that tree is still there (a hung master, orphaned workers) gets SIGKILL, by PID.
    local p
    for p in $tree; do
        if kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    done
    wait "$pid" 2>/dev/null || true
    unregister "$name"
}

stop_all_but_origin() {
    local name
    for name in $(awk '$1 != "origin" { print $1 }' "$REGISTRY" 2>/dev/null | tac); do stop_server "$name"; done
}

stop_all() {
    [[ -f $REGISTRY ]] || return 0
    local name
    for name in $(awk '{ print $1 }' "$REGISTRY" | tac); do stop_server "$name"; done
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # A scenario still running (we were interrupted): end it and what it runs (wrk, the stampede client).
    if [[ -n ${SCENARIO_PID:-} ]] && kill -0 "$SCENARIO_PID" 2>/dev/null; then
        local p
        for p in $(tree_pids "$SCENARIO_PID"); do kill -TERM "$p" 2>/dev/null || true; done
        wait "$SCENARIO_PID" 2>/dev/null || true
    fi
    if [[ -s ${REGISTRY:-/nonexistent} ]]; then
        log "stopping the servers this run started"
        stop_all
    fi
    exit "$rc"
}

# ---- small helpers -----------------------------------------------------------------------------------------
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

require_free_port() {
    port_in_use "$1" && die "port $1 is already in use on 127.0.0.1 ($2); free it or set another port (see README)"
    return 0
}

# wait_http URL PID NAME [SECONDS]: until URL answers at all, the process dies, or the time runs out.
wait_http() {
    local url=$1 pid=$2 name=$3 limit=${4:-30} waited=0 tls=()
    # A TLS front is asked over HTTPS, trusting the run's own certificate (it names 127.0.0.1).
    [[ $url != https://* ]] || tls=(--cacert "$TLS_DIR/cert.pem")
    while ! curl -s -o /dev/null --max-time 1 "${tls[@]}" "$url"; do
        kill -0 "$pid" 2>/dev/null || die "$name exited during start-up; see its log in $RUN_DIR"
        ((waited < limit * 10)) || die "$name did not answer $url within ${limit}s"
        sleep 0.1
        waited=$((waited + 1))
    done
}

cpu_snapshot() {
    local p s f
    for p in "$@"; do
        s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        s=${s##*) }
        read -ra f <<<"$s"
        # After "(comm) ", index 0 is field 3 (state): utime is field 14, stime field 15. Printed: PID, user + system,
        # system.
        printf '%s %s %s\n' "$p" $((f[11] + f[12])) "${f[12]}"
    done
}

# cpu_delta_us BEFORE AFTER: CPU µs used between two snapshots, summed over PIDs present in both.
cpu_delta_us() {
    cpu_delta_column 2 "$1" "$2"
}

# cpu_sys_delta_us BEFORE AFTER: the part of cpu_delta_us spent in the kernel (system time). Beside the whole, it
# says whether a server's CPU per request differs from another's in its own code or in its system calls.
cpu_sys_delta_us() {
    cpu_delta_column 3 "$1" "$2"
}

cpu_delta_column() {
    awk -v tck="$CLK_TCK" -v c="$1" 'NR == FNR { b[$1] = $c; next } ($1 in b) { d += $c - b[$1] } END { printf "%d\n", d * 1000000 / tck }' \
        <(printf '%s\n' "$2") <(printf '%s\n' "$3")
}

# steal_snapshot: the machine's steal and total CPU time so far, in ticks (/proc/stat's cpu line). Steal is time a
# virtual CPU was ready to run and the hypervisor ran something else: on a shared host it stalls every process for
# milliseconds at a time, which shows up as tail latency no server caused.
steal_snapshot() {
    awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9; exit }' /proc/stat
}

# steal_pct BEFORE AFTER: steal as a percentage of all CPU time between two snapshots.
steal_pct() {
    awk -v b="$1" -v a="$2" 'BEGIN { split(b, x, " "); split(a, y, " "); t = y[2] - x[2]; printf "%.1f\n", (t > 0 ? (y[1] - x[1]) * 100 / t : 0) }'
}

# connection_split PORT: established connections to PORT per owning process, largest first ("12/4"; "n/a" without
# ss). nginx's workers take connections from one shared listening socket unless it is a reuseport one, and how
# they share them out decides how much of a core each one needs.
connection_split() {
    command -v ss >/dev/null || {
        echo n/a
        return 0
    }
    ss -tnpH state established "( sport = :$1 )" 2>/dev/null | grep -o 'pid=[0-9]*' | sort | uniq -c | sort -rn |
        awk '{ printf "%s%s", (NR > 1 ? "/" : ""), $1 } END { if (NR == 0) printf "0"; printf "\n" }'
}

rss_kb() {
    local p total=0 kb
    for p in "$@"; do
        kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
        total=$((total + ${kb:-0}))
    done
    echo "$total"
}

target_port() {
    case $1 in
    proxy | proxy-uncompressed) echo "$PROXY_PORT" ;;
    nginx) echo "$NGINX_PORT" ;;
    nginx-nocache) echo "$NGINX_NOCACHE_PORT" ;;
    nginx-reuseport) echo "$NGINX_REUSEPORT_PORT" ;;
    nginx-gzip) echo "$NGINX_GZIP_PORT" ;;
    proxy-h2) echo "$PROXY_H2_PORT" ;;
    nginx-h2) echo "$NGINX_H2_PORT" ;;
    varnish | varnish-gzip) echo "$VARNISH_PORT" ;;
    *) die "unknown target $1" ;;
    esac
}

# target_url TARGET: scheme, host and port of TARGET (https for the TLS + HTTP/2 fronts, *-h2).
target_url() {
    local scheme=http
    [[ $1 != *-h2 ]] || scheme=https
    echo "$scheme://127.0.0.1:$(target_port "$1")"
}

# ensure_tls_cert: the run's self-signed certificate and key in TLS_DIR (made once per run; see gen_tls_cert).
ensure_tls_cert() {
    [[ -s $TLS_DIR/cert.pem && -s $TLS_DIR/key.pem ]] && return 0
    gen_tls_cert "$TLS_DIR" || die "openssl could not make a self-signed certificate in $TLS_DIR"
    log "made a self-signed P-256 certificate for localhost/127.0.0.1 in $TLS_DIR"
}

# The registry name of the server that answers for a target. proxy-uncompressed (store-time compression off) and
# varnish-gzip (JSON stored gzipped) are the proxy and Varnish started with another config; nginx-h2 is the nginx
# instance's TLS + HTTP/2 server block; proxy-h2 is a proxy process of its own (its own ports and config).
target_server() {
    case $1 in
    nginx-nocache | nginx-reuseport | nginx-gzip | nginx-h2) echo nginx ;;
    proxy-uncompressed) echo proxy ;;
    varnish-gzip) echo varnish ;;
    *) echo "$1" ;;
    esac
}

server_log() {
    case $1 in
    proxy) echo "$RUN_DIR/proxy/proxy.log" ;;
    proxy-h2) echo "$RUN_DIR/proxy-h2/proxy.log" ;;
    nginx) echo "$RUN_DIR/nginx/logs/error.log" ;;
    varnish) echo "$RUN_DIR/varnish/varnishd.log" ;;
    *) echo "$RUN_DIR/origin/logs/error.log" ;;
    esac
}

# server_alive TARGET: whether the server behind TARGET is still running.
server_alive() {
    local pid
    pid=$(registered_pid "$(target_server "$1")")
    [[ -n $pid ]] && is_ours "$pid"
}

# server_died TARGET WHEN: records (log and notes) that the server exited, with how and its log's last lines.
server_died() {
    local server pid status how
    server=$(target_server "$1")
    pid=$(registered_pid "$server")
    status=0
    wait "$pid" 2>/dev/null || status=$?
    if ((status > 128 && status < 160)); then
        how="killed by SIG$(kill -l $((status - 128)))"
    elif ((status == 127)); then
        how="exited"
    else
        how="exited with status $status"
    fi
    unregister "$server"
    log "$server (pid $pid) $how $2; last lines of $(server_log "$server"):"
    tail -n 5 "$(server_log "$server")" >&2 2>/dev/null || true
    note "$server (pid $pid) $how $2 (log: $(server_log "$server"))"
}

# ---- set-up: tools and the proxy binary --------------------------------------------------------------------
ensure_tools() {
    local missing=() tool
    command -v wrk >/dev/null || missing+=(wrk)
    command -v nginx >/dev/null || missing+=(nginx)
    command -v varnishd >/dev/null || missing+=(varnish)
    command -v curl >/dev/null || missing+=(curl)
    command -v python3 >/dev/null || missing+=(python3)
    [[ " $SCENARIOS " != *" instructions "* && " $SCENARIOS " != *" speeds "* ]] || command -v perf >/dev/null ||
        missing+=(linux-perf)
    if [[ " $SCENARIOS " == *" h2-hit "* ]]; then
        command -v h2load >/dev/null || missing+=(nghttp2-client)
        command -v openssl >/dev/null || missing+=(openssl)
    fi
    ((${#missing[@]} == 0)) && return 0
    [[ $SKIP_INSTALL == 1 ]] && die "missing tools: ${missing[*]} (SKIP_INSTALL=1)"
    [[ $(id -u) == 0 ]] || die "missing tools: ${missing[*]}; install them or run as root so apt-get can"
    command -v apt-get >/dev/null || die "missing tools: ${missing[*]} and no apt-get to install them"
    log "installing ${missing[*]} (apt-get)"
    timeout 600 apt-get update -qq >&2
    # RUNLEVEL=1: ask the packages' maintainer scripts not to start their default services.
    RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}" >&2
    for tool in wrk nginx varnishd curl python3; do
        command -v "$tool" >/dev/null || die "$tool still missing after apt-get install"
    done
    if [[ " $SCENARIOS " == *" h2-hit "* ]]; then
        for tool in h2load openssl; do
            command -v "$tool" >/dev/null || die "$tool still missing after apt-get install"
        done
    fi
}

build_proxy() {
    if [[ -n $BIN ]]; then
        [[ -x $BIN ]] || die "BIN=$BIN is not an executable"
        return 0
    fi
    BIN=$SCRATCH_PATH/release/sdui-proxy
    if [[ $SKIP_BUILD == 1 ]]; then
        [[ -x $BIN ]] || die "SKIP_BUILD=1 but there is no $BIN; build it or set BIN"
        return 0
    fi
    command -v swift >/dev/null || die "swift is not on PATH (or set SKIP_BUILD=1 BIN=...)"
    log "building sdui-proxy (release, scratch path $SCRATCH_PATH; this can take several minutes)"
    (cd "$ROOT" && timeout --foreground "$BUILD_TIMEOUT" swift build -c release --scratch-path "$SCRATCH_PATH" --product sdui-proxy >&2) ||
        die "release build failed"
    [[ -x $BIN ]] || die "the build did not produce $BIN"
}

# probe_proxy_compression: sets PROXY_COMPRESSION_SUPPORT to yes when the binary's --check-config accepts a
# `compression` section, no when it refuses it as an unknown key (a binary from before store-time compression),
# and to refused otherwise (PROXY_COMPRESSION_DETAIL then says why).
probe_proxy_compression() {
    local dir=$RUN_DIR/probe out
    mkdir -p "$dir"
    PROXY_COMPRESSION='{ encodings: [] }' gen_proxy_yaml "$dir/sdui-proxy.yaml" "$PROXY_PORT" "$PROXY_ADMIN_PORT" "$ORIGIN_PORT" 1MiB
    if out=$(timeout 30 "$BIN" --check-config --config "$dir/sdui-proxy.yaml" 2>&1); then
        PROXY_COMPRESSION_SUPPORT=yes
        PROXY_COMPRESSION_DETAIL="the binary accepts a compression section"
    elif grep -q 'compression: unknown key' <<<"$out"; then
        PROXY_COMPRESSION_SUPPORT=no
        PROXY_COMPRESSION_DETAIL="binary without compression support (its --check-config refuses a compression section as an unknown key)"
    else
        PROXY_COMPRESSION_SUPPORT=refused
        PROXY_COMPRESSION_DETAIL="the binary's --check-config refuses 'compression: { encodings: [] }': $(head -n 3 <<<"$out" | tr '\n' ' ')"
    fi
    log "proxy compression: $PROXY_COMPRESSION_DETAIL"
}

# ---- servers -----------------------------------------------------------------------------------------------
start_origin() {
    local dir=$RUN_DIR/origin
    require_free_port "$ORIGIN_PORT" origin
    rm -rf "$dir"
    mkdir -p "$dir/www"
    cp "$FIXTURE" "$dir/www/screen.json"
    gen_origin_conf "$dir" "$ORIGIN_PORT" "$dir/www" "$ORIGIN_SLOW_RATE"
    nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" >"$dir/stdout.log" 2>&1 &
    register origin $!
    wait_http "http://127.0.0.1:$ORIGIN_PORT/ready" "$!" origin
    log "origin (nginx) on :$ORIGIN_PORT, pid $(registered_pid origin)"
}

# start_proxy MAX_MB [h2] (PROXY_COMPRESSION, when set, is the config's compression section). With "h2", the
# h2-hit scenario's proxy: registry name proxy-h2, its own directory and ports (PROXY_H2_PORT, PROXY_H2_ADMIN_PORT),
# and a public listener on TLS + HTTP/2 with the run's certificate.
start_proxy() {
    local mb=$1 h2=${2:-} name=proxy port=$PROXY_PORT admin_port=$PROXY_ADMIN_PORT scheme=http tls=()
    if [[ $h2 == h2 ]]; then
        name=proxy-h2 port=$PROXY_H2_PORT admin_port=$PROXY_H2_ADMIN_PORT scheme=https
        ensure_tls_cert
        tls=("$TLS_DIR/cert.pem" "$TLS_DIR/key.pem")
    fi
    local dir=$RUN_DIR/$name
    require_free_port "$port" "$name"
    require_free_port "$admin_port" "$name admin"
    mkdir -p "$dir"
    gen_proxy_yaml "$dir/sdui-proxy.yaml" "$port" "$admin_port" "$ORIGIN_PORT" "${mb}MiB" "${tls[@]}"
    printf '=== %s: start, cache %s MiB, compression %s, %s\n' "$(date +%T)" "$mb" "${PROXY_COMPRESSION:-default}" "$BIN" \
        >>"$dir/proxy.log"
    "$BIN" --config "$dir/sdui-proxy.yaml" >>"$dir/proxy.log" 2>&1 &
    register "$name" $!
    wait_http "http://127.0.0.1:$admin_port/health" "$!" "$name"
    wait_http "$scheme://127.0.0.1:$port/ready" "$!" "$name"
    log "sdui-proxy on :$port${h2:+ (TLS + HTTP/2)} (admin :$admin_port, cache ${mb} MiB, compression ${PROXY_COMPRESSION:-default})," \
        "pid $(registered_pid "$name")"
}

# start_nginx MAX_MB [GZIP_PORT] [H2_PORT]: the proxy_cache server and the no-cache server, one nginx instance; with
# GZIP_PORT, also the proxy_cache server that gzips at every hit (the hit-gzip scenario's nginx); with H2_PORT, also
# the proxy_cache server on TLS + HTTP/2 with the run's certificate (the h2-hit scenario's nginx).
start_nginx() {
    local mb=$1 gzip_port=${2:-} h2_port=${3:-} dir=$RUN_DIR/nginx tls=()
    require_free_port "$NGINX_PORT" nginx
    require_free_port "$NGINX_NOCACHE_PORT" "nginx no-cache"
    require_free_port "$NGINX_REUSEPORT_PORT" "nginx reuseport"
    [[ -z $gzip_port ]] || require_free_port "$gzip_port" "nginx gzip"
    if [[ -n $h2_port ]]; then
        require_free_port "$h2_port" "nginx h2"
        ensure_tls_cert
        tls=("$h2_port" "$TLS_DIR/cert.pem" "$TLS_DIR/key.pem")
    fi
    rm -rf "$dir"
    gen_nginx_conf "$dir" "$NGINX_PORT" "$NGINX_NOCACHE_PORT" "$NGINX_REUSEPORT_PORT" "$ORIGIN_PORT" "${mb}m" "$gzip_port" "${tls[@]}"
    nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" >"$dir/stdout.log" 2>&1 &
    register nginx $!
    wait_http "http://127.0.0.1:$NGINX_PORT/ready" "$!" nginx
    wait_http "http://127.0.0.1:$NGINX_NOCACHE_PORT/ready" "$!" nginx
    wait_http "http://127.0.0.1:$NGINX_REUSEPORT_PORT/ready" "$!" nginx
    [[ -z $gzip_port ]] || wait_http "http://127.0.0.1:$gzip_port/ready" "$!" nginx
    [[ -z $h2_port ]] || wait_http "https://127.0.0.1:$h2_port/ready" "$!" nginx
    log "nginx proxy_cache on :$NGINX_PORT (and with reuseport on :$NGINX_REUSEPORT_PORT), no cache on" \
        ":$NGINX_NOCACHE_PORT${gzip_port:+, proxy_cache with gzip on :$gzip_port}${h2_port:+, proxy_cache on TLS + HTTP/2 on :$h2_port}" \
        "(max_size ${mb}m), pid $(registered_pid nginx)"
}

# start_varnish MAX_MB [gzip]: with "gzip", the VCL stores JSON gzipped (the hit-gzip scenario's Varnish).
start_varnish() {
    local mb=$1 gzip=${2:-} dir=$RUN_DIR/varnish
    require_free_port "$VARNISH_PORT" varnish
    rm -rf "$dir"
    mkdir -p "$dir"
    gen_vcl "$dir/bench.vcl" "$ORIGIN_PORT" "$gzip"
    # -F: foreground (we background it and own its PID); -j none: no privilege separation, nothing outside $dir.
    varnishd -F -j none -n "$dir/instance" -a "127.0.0.1:$VARNISH_PORT" -f "$dir/bench.vcl" \
        -s "malloc,${mb}m" -T none >"$dir/varnishd.log" 2>&1 &
    register varnish $!
    wait_http "http://127.0.0.1:$VARNISH_PORT/ready" "$!" varnish
    log "Varnish on :$VARNISH_PORT (malloc ${mb}m${gzip:+, JSON stored gzipped}), pid $(registered_pid varnish)"
}

# start_targets MB TARGET...: starts the servers behind the given targets (once each). A target that is a server
# with another config (proxy-uncompressed, varnish-gzip) cannot run next to the same server's plain target.
start_targets() {
    local mb=$1 target server started=" " nginx_gzip_port="" nginx_h2_port=""
    shift
    [[ " $* " != *" proxy "* || " $* " != *" proxy-uncompressed "* ]] ||
        die "proxy and proxy-uncompressed are one server with two configs; they cannot be started together"
    [[ " $* " != *" varnish "* || " $* " != *" varnish-gzip "* ]] ||
        die "varnish and varnish-gzip are one server with two configs; they cannot be started together"
    [[ " $* " != *" nginx-gzip "* ]] || nginx_gzip_port=$NGINX_GZIP_PORT
    [[ " $* " != *" nginx-h2 "* ]] || nginx_h2_port=$NGINX_H2_PORT
    for target in "$@"; do
        server=$(target_server "$target")
        [[ $started == *" $server "* ]] && continue
        case $target in
        proxy) start_proxy "$mb" ;;
        proxy-uncompressed) PROXY_COMPRESSION='{ encodings: [] }' start_proxy "$mb" ;;
        proxy-h2) start_proxy "$mb" h2 ;;
        nginx | nginx-*) start_nginx "$mb" "$nginx_gzip_port" "$nginx_h2_port" ;;
        varnish) start_varnish "$mb" ;;
        varnish-gzip) start_varnish "$mb" gzip ;;
        esac
        started+="$server "
    done
}

# ---- measuring ---------------------------------------------------------------------------------------------
# curl_head TARGET PATH: "STATUS XCACHE" of one GET (over TLS + HTTP/2 for the *-h2 targets).
curl_head() {
    local headers status xcache tls=()
    [[ $1 != *-h2 ]] || tls=(--http2 --cacert "$TLS_DIR/cert.pem")
    headers=$(curl -s --max-time 10 "${tls[@]}" -D - -o /dev/null "$(target_url "$1")$2") || {
        echo "000 -"
        return 0
    }
    status=$(awk 'NR == 1 { print $2 }' <<<"$headers")
    xcache=$(awk -F': *' 'tolower($1) == "x-cache" { gsub(/\r/, "", $2); print $2 }' <<<"$headers")
    echo "${status:-000} ${xcache:--}"
}

# run_load SCENARIO TARGET CONNS ROUND SECONDS PATH SCRIPT [SCRIPT ARGS...]
# One wrk run; ROUND "warm" is not recorded. Server CPU and RSS come from /proc for the server's process tree.
run_load() {
    local scenario=$1 target=$2 conns=$3 round=$4 seconds=$5 path=$6 script=$7
    shift 7
    local root pids before after out cpu_us sys_us rss line steal_before steal split_file split sampler
    root=$(registered_pid "$(target_server "$target")")
    [[ -n $root ]] || die "no running server for $target"
    read -ra pids <<<"$(tree_pids "$root" | tr '\n' ' ')"
    local url
    url="http://127.0.0.1:$(target_port "$target")$path"
    local outfile=$RESULTS/wrk/$scenario-$target-c$conns-$round.txt
    before=$(cpu_snapshot "${pids[@]}")
    steal_before=$(steal_snapshot)
    split_file=$RESULTS/wrk/$scenario-$target-c$conns-$round.split
    (
        sleep "$(awk -v s="$seconds" 'BEGIN { print s / 2 }')"
        connection_split "$(target_port "$target")" >"$split_file"
    ) &
    sampler=$!
    # --foreground keeps wrk in our process group, so Ctrl-C reaches it (wrk then stops and prints its summary).
    if ! out=$(timeout --foreground --kill-after=10 $((seconds + 30)) \
        wrk -t"$WRK_THREADS" -c"$conns" -d"${seconds}s" --timeout 5s "${WRK_EXTRA[@]}" -s "$LUA_DIR/$script" "$url" -- "$@" 2>&1); then
        printf '%s\n' "$out" >"$outfile"
        kill "$sampler" 2>/dev/null || true
        die "wrk failed for $scenario/$target/c$conns (output in $outfile)"
    fi
    after=$(cpu_snapshot "${pids[@]}")
    steal=$(steal_pct "$steal_before" "$(steal_snapshot)")
    wait "$sampler" || true
    split=$(cat "$split_file" 2>/dev/null || echo n/a)
    printf '%s\n' "$out" >"$outfile"
    if ! server_alive "$target"; then
        server_died "$target" "during $scenario/c$conns/$round"
        die "$target is gone; $scenario cannot go on"
    fi
    cpu_us=$(cpu_delta_us "$before" "$after")
    sys_us=$(cpu_sys_delta_us "$before" "$after")
    read -ra pids <<<"$(tree_pids "$root" | tr '\n' ' ')"
    rss=$(rss_kb "${pids[@]}")
    line=$(grep '^BENCH ' <<<"$out" || true)
    [[ -n $line ]] || die "wrk printed no BENCH line for $scenario/$target/c$conns (output in $outfile)"
    local -A r=()
    local kv
    for kv in ${line#BENCH }; do r[${kv%%=*}]=${kv#*=}; done
    local per_req=n/a bytes_per_response=n/a
    ((r[requests] > 0)) && per_req=$(awk -v c="$cpu_us" -v s="$sys_us" -v n="${r[requests]}" 'BEGIN { printf "%.1f (sys %.1f)", c / n, s / n }')
    ((r[requests] > 0)) && bytes_per_response=$((r[bytes] / r[requests]))
    log "$(printf '%-8s %-15s c=%-4s %-5s %10s req/s  p50 %6.2f ms  p99 %7.2f ms  cpu %7s µs/req  rss %6d MiB  errors %s  hit/miss %s/%s  steal %s%%  conns/process %s  bytes/response %s' \
        "$scenario" "$target" "$conns" "$round" "${r[rps]}" "$(awk -v u="${r[p50_us]}" 'BEGIN { print u / 1000 }')" \
        "$(awk -v u="${r[p99_us]}" 'BEGIN { print u / 1000 }')" "$per_req" $((rss / 1024)) "${r[errors]}" "${r[hits]}" "${r[misses]}" "$steal" "$split" "$bytes_per_response")"
    # A scenario whose answers must be compressed (hit-gzip) sets MAX_BYTES_PER_RESPONSE to the identity body's size:
    # more than that per response (headers included) means the load was answered uncompressed.
    if [[ -n ${MAX_BYTES_PER_RESPONSE:-} && $bytes_per_response != n/a ]] && ((bytes_per_response >= MAX_BYTES_PER_RESPONSE)); then
        die "$scenario/$target/c$conns: $bytes_per_response bytes per response, not under the identity body's $MAX_BYTES_PER_RESPONSE: the load was not answered compressed (output in $outfile)"
    fi
    [[ $round == warm ]] && return 0
    if ((r[errors] > 0)); then
        note "$scenario/$target/c$conns round $round: ${r[errors]} errors (connect ${r[connect]}, read ${r[read]}, write ${r[write]}, non-2xx/3xx ${r[status]}, timeout ${r[timeout]})"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$scenario" "$target" "$conns" "$round" "${r[requests]}" "${r[duration_us]}" "${r[rps]}" "${r[p50_us]}" \
        "${r[p99_us]}" "${r[errors]}" "$cpu_us" "$rss" "${r[hits]}" "${r[misses]}" "${r[other]}" "$steal" "$split" \
        "${r[bytes]}" "$sys_us" >>"$RESULTS/runs.tsv"
}

# ---- scenarios ---------------------------------------------------------------------------------------------
# start_cached SCENARIO TARGET...: starts the targets, caches HIT_PATH on each (checking the second GET is a hit),
# and warms each with unrecorded hits.
start_cached() {
    local scenario=$1 target got
    shift
    start_targets "$CACHE_MB" "$@"
    for target in "$@"; do
        curl_head "$target" "$HIT_PATH" >/dev/null
        got=$(curl_head "$target" "$HIT_PATH")
        [[ $got == "200 HIT" ]] || die "$target: the second GET $HIT_PATH answered '$got', expected '200 HIT'"
    done
    for target in "$@"; do run_load "$scenario" "$target" 64 warm "$WARMUP" "$HIT_PATH" hit.lua; done
}

scenario_hit() {
    local targets target round conns
    read -ra targets <<<"$HIT_TARGETS"
    start_cached hit "${targets[@]}"
    for ((round = 1; round <= ROUNDS; round++)); do
        for conns in $CONNECTIONS; do
            for target in "${targets[@]}"; do run_load hit "$target" "$conns" "$round" "$DURATION" "$HIT_PATH" hit.lua; done
        done
    done
}

# header_value NAME: the values of header NAME in the response head on stdin, joined with ", " (CRs dropped).
header_value() {
    awk -v n="$(tr '[:upper:]' '[:lower:]' <<<"$1")" -F': *' '
        tolower($1) == n { sub(/^[^:]*: */, ""); gsub(/\r/, ""); v = (v == "" ? $0 : v ", " $0) }
        END { print v }'
}

# check_gzip_hit TARGET: before any load, one GET of HIT_PATH with Accept-Encoding: gzip (after an identity GET has
# stored it, and a first gzip GET has let the target make or store its gzip form) must be a 200 HIT with
# Content-Encoding: gzip and a body that gunzips to the fixture. The proxy makes the form on its pool after the
# first gzip GET, so the GET is repeated (at most 50 times, 0.1 s apart) until it comes in gzip. Anything else ends
# the scenario, so a run never compares an identity answer with a gzip one. What it saw goes to gzip-check.tsv.
check_gzip_hit() {
    local target=$1 url headers status xcache encoding vary length same attempt
    local body=$RUN_DIR/gzip-check-$target.body
    url="http://127.0.0.1:$(target_port "$target")$HIT_PATH"
    curl_head "$target" "$HIT_PATH" >/dev/null
    curl -s --max-time 10 -H 'Accept-Encoding: gzip' -o /dev/null "$url" || true
    for attempt in $(seq 1 50); do
        headers=$(curl -s --max-time 10 -H 'Accept-Encoding: gzip' -D - -o "$body" "$url") ||
            die "$target: GET $HIT_PATH with Accept-Encoding: gzip failed (curl exit $?)"
        encoding=$(header_value Content-Encoding <<<"$headers")
        [[ $encoding != gzip && $attempt -lt 50 ]] || break
        sleep 0.1
    done
    status=$(awk 'NR == 1 { print $2 }' <<<"$headers")
    xcache=$(header_value X-Cache <<<"$headers")
    vary=$(header_value Vary <<<"$headers")
    length=$(header_value Content-Length <<<"$headers")
    [[ -n $length ]] || length=$(header_value Transfer-Encoding <<<"$headers")
    [[ $status == 200 ]] || die "$target: GET $HIT_PATH with Accept-Encoding: gzip answered $status, expected 200"
    [[ $xcache == HIT ]] || die "$target: GET $HIT_PATH with Accept-Encoding: gzip answered X-Cache '${xcache:--}', expected HIT"
    [[ $encoding == gzip ]] ||
        die "$target: GET $HIT_PATH with Accept-Encoding: gzip answered Content-Encoding '${encoding:-none}', expected gzip; hit-gzip will not compare an uncompressed answer with compressed ones"
    same=$(python3 -c '
import gzip, json, sys
try:
    got = gzip.decompress(open(sys.argv[1], "rb").read())
except Exception as error:
    print(f"not gzip ({error})"); sys.exit(1)
want = open(sys.argv[2], "rb").read()
if got == want:
    print("bytes")
else:
    try:
        same = json.loads(got) == json.loads(want)
    except ValueError:
        same = False
    print("json" if same else f"differs ({len(got)} bytes gunzipped, fixture {len(want)})")
    sys.exit(0 if same else 1)' "$body" "$FIXTURE") ||
        die "$target: the gzip answer to GET $HIT_PATH does not gunzip to fixtures/screen.json: $same (body in $body)"
    [[ -f $RESULTS/gzip-check.tsv ]] ||
        printf 'target\tstatus\tx_cache\tcontent_encoding\tgzip_body_bytes\tcontent_length\tvary\tgunzipped_equals_fixture\n' >"$RESULTS/gzip-check.tsv"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$status" "$xcache" "$encoding" "$(wc -c <"$body")" "${length:--}" \
        "${vary:--}" "$same" >>"$RESULTS/gzip-check.tsv"
    log "hit-gzip $target: 200 HIT, Content-Encoding gzip, $(wc -c <"$body") bytes gunzipping to the fixture ($same), Vary '${vary:--}'"
    [[ ,${vary// /}, == *,[Aa]ccept-[Ee]ncoding,* ]] || note "hit-gzip/$target: its gzip answer has no Vary: Accept-Encoding (Vary: '${vary:--}')"
}

# hit-gzip: the hit scenario's cached URL asked for with Accept-Encoding: gzip. The proxy answers from the gzip form
# it stored once, nginx gzips its cached identity body at every hit (level 1), Varnish answers from the gzip it
# stored (do_gzip). Measured as the hit scenario is; the report sets the proxy against nginx and against its own
# identity hits of the hit scenario in the same run.
scenario_hit_gzip() {
    local targets target round conns
    read -ra targets <<<"$GZIP_HIT_TARGETS"
    if [[ " ${targets[*]} " == *" proxy "* && $PROXY_COMPRESSION_SUPPORT != yes ]]; then
        die "proxy: $PROXY_COMPRESSION_DETAIL; hit-gzip needs a binary with store-time compression (GZIP_HIT_TARGETS without proxy measures the anchors alone)"
    fi
    start_targets "$CACHE_MB" "${targets[@]}"
    for target in "${targets[@]}"; do check_gzip_hit "$target"; done
    # Guard on every run, warm-ups included: compressed answers (headers and all) are smaller than the identity body.
    MAX_BYTES_PER_RESPONSE=$(wc -c <"$FIXTURE")
    for target in "${targets[@]}"; do run_load hit-gzip "$target" 64 warm "$WARMUP" "$HIT_PATH" hit-gzip.lua; done
    for ((round = 1; round <= ROUNDS; round++)); do
        for conns in $GZIP_HIT_CONNECTIONS; do
            for target in "${targets[@]}"; do
                run_load hit-gzip "$target" "$conns" "$round" "$DURATION" "$HIT_PATH" hit-gzip.lua
            done
        done
    done
}

# ---- h2-hit: hits over TLS + HTTP/2, driven by h2load -----------------------------------------------------------
# h2load_summary: reads h2load's output on stdin, prints "key=value" pairs: done, succeeded, errors (failed, i.e.
# non-2xx/3xx, plus errored plus timeout), duration_us (its "finished in"), rps, bytes (traffic total), proto (the
# ALPN protocol), tls, cipher and key (the server's key exchange group), "-" for what it did not print.
h2load_summary() {
    awk '
        /^finished in / {
            d = $3; sub(/,$/, "", d)
            if (d ~ /ms$/) { sub(/ms$/, "", d); us = d * 1000 } else if (d ~ /us$/) { sub(/us$/, "", d); us = d }
            else { sub(/s$/, "", d); us = d * 1000000 }
            rps = $4
        }
        /^requests: / { done = $6; ok = $8; errors = $10 + $12 + $14 }
        /^traffic: / { b = $3; gsub(/[()]/, "", b) }
        /^Application protocol: / { proto = $3 }
        /^TLS Protocol: / { tls = $3 }
        /^Cipher: / { cipher = $2 }
        /^Server Temp Key: / { key = $4 }
        END {
            printf "done=%d succeeded=%d errors=%d duration_us=%d rps=%s bytes=%s proto=%s tls=%s cipher=%s key=%s\n",
                done, ok, errors, us, (rps == "" ? 0 : rps), (b == "" ? 0 : b), (proto == "" ? "-" : proto),
                (tls == "" ? "-" : tls), (cipher == "" ? "-" : cipher), (key == "" ? "-" : key)
        }'
}

# percentiles_us LOG: "P50 P99" in µs over the answered requests (status 2xx/3xx) of an h2load --log-file (columns:
# start time, status, µs until the end of the response), nearest rank; "0 0" when there are none.
percentiles_us() {
    awk -F'\t' '$2 >= 200 && $2 < 400 { print $3 }' "$1" | sort -n |
        awk '{ v[NR] = $1 } END {
            if (NR == 0) { print "0 0"; exit }
            i = int((NR * 50 + 99) / 100); j = int((NR * 99 + 99) / 100)
            print v[i < 1 ? 1 : i], v[j < 1 ? 1 : j]
        }'
}

# run_h2load SCENARIO TARGET STREAMS ROUND SECONDS: one h2load run of SECONDS on H2_CLIENTS TLS + HTTP/2 connections
# with STREAMS / H2_CLIENTS concurrent streams each, every request a GET of HIT_PATH; ROUND "warm" is not recorded.
# Server CPU, RSS, steal and connections per process are taken as run_load takes them; p50/p99 come from h2load's
# per-request log (h2load itself prints no percentiles). A run that did not negotiate h2 ends the scenario.
run_h2load() {
    local scenario=$1 target=$2 streams=$3 round=$4 seconds=$5
    local per_client=$((streams / H2_CLIENTS)) threads=$H2_THREADS
    ((threads <= H2_CLIENTS)) || threads=$H2_CLIENTS
    local root pids before after out cpu_us sys_us rss steal steal_before split_file split sampler p50 p99
    root=$(registered_pid "$(target_server "$target")")
    [[ -n $root ]] || die "no running server for $target"
    read -ra pids <<<"$(tree_pids "$root" | tr '\n' ' ')"
    local outfile=$RESULTS/h2load/$scenario-$target-s$streams-$round.txt reqlog=$RUN_DIR/h2load-requests.log
    rm -f "$reqlog" # h2load appends to its log file
    before=$(cpu_snapshot "${pids[@]}")
    steal_before=$(steal_snapshot)
    split_file=$RESULTS/h2load/$scenario-$target-s$streams-$round.split
    (
        sleep "$(awk -v s="$seconds" 'BEGIN { print s / 2 }')"
        connection_split "$(target_port "$target")" >"$split_file"
    ) &
    sampler=$!
    if ! out=$(timeout --foreground --kill-after=10 $((seconds + 30)) \
        h2load -t"$threads" -c"$H2_CLIENTS" -m"$per_client" -D "$seconds" --log-file "$reqlog" \
        "$(target_url "$target")$HIT_PATH" 2>&1); then
        printf '%s\n' "$out" >"$outfile"
        kill "$sampler" 2>/dev/null || true
        die "h2load failed for $scenario/$target/s$streams (output in $outfile)"
    fi
    after=$(cpu_snapshot "${pids[@]}")
    steal=$(steal_pct "$steal_before" "$(steal_snapshot)")
    wait "$sampler" || true
    split=$(cat "$split_file" 2>/dev/null || echo n/a)
    printf '%s\n' "$out" >"$outfile"
    if ! server_alive "$target"; then
        server_died "$target" "during $scenario/s$streams/$round"
        die "$target is gone; $scenario cannot go on"
    fi
    cpu_us=$(cpu_delta_us "$before" "$after")
    sys_us=$(cpu_sys_delta_us "$before" "$after")
    read -ra pids <<<"$(tree_pids "$root" | tr '\n' ' ')"
    rss=$(rss_kb "${pids[@]}")
    local -A r=()
    local kv
    for kv in $(h2load_summary <<<"$out"); do r[${kv%%=*}]=${kv#*=}; done
    [[ ${r[proto]} == h2 ]] || die "$scenario/$target: h2load negotiated '${r[proto]}', not h2 (output in $outfile)"
    ((r[done] > 0)) || die "h2load completed no request for $scenario/$target/s$streams (output in $outfile)"
    read -r p50 p99 <<<"$(percentiles_us "$reqlog")"
    local per_req
    per_req=$(awk -v c="$cpu_us" -v n="${r[done]}" 'BEGIN { printf "%.1f", c / n }')
    log "$(printf '%-8s %-15s s=%-4s %-5s %10s req/s  p50 %6.2f ms  p99 %7.2f ms  cpu %7s µs/req  rss %6d MiB  errors %s  steal %s%%  conns/process %s  %s %s' \
        "$scenario" "$target" "$streams" "$round" "${r[rps]}" "$(awk -v u="$p50" 'BEGIN { print u / 1000 }')" \
        "$(awk -v u="$p99" 'BEGIN { print u / 1000 }')" "$per_req" $((rss / 1024)) "${r[errors]}" "$steal" "$split" \
        "${r[tls]}" "${r[cipher]}")"
    rm -f "$reqlog"
    [[ $round == warm ]] && return 0
    ((r[errors] == 0)) || note "$scenario/$target/s$streams round $round: ${r[errors]} h2load errors (non-2xx/3xx, errored, timeout; output in $outfile)"
    # hits/misses/other: h2load does not read X-Cache (every target's second GET was checked to be a HIT).
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$scenario" "$target" "$streams" "$round" "${r[done]}" "${r[duration_us]}" "${r[rps]}" "$p50" "$p99" \
        "${r[errors]}" "$cpu_us" "$rss" - - - "$steal" "$split" "${r[bytes]}" "$sys_us" >>"$RESULTS/runs.tsv"
}

# run_h2_handshakes TARGET ROUND: H2_HANDSHAKES h2load clients at once, each opening its own TLS connection (a full
# handshake: h2load does not resume sessions), negotiating h2 and making one request (-n = -c, -m 1). Handshakes per
# second = connections completed / h2load's elapsed time; server CPU per handshake as for requests. A line in
# h2-handshakes.tsv.
run_h2_handshakes() {
    local target=$1 round=$2 root pids before after out cpu_us steal_before steal threads=$H2_THREADS
    ((threads <= H2_HANDSHAKES)) || threads=$H2_HANDSHAKES
    root=$(registered_pid "$(target_server "$target")")
    [[ -n $root ]] || die "no running server for $target"
    read -ra pids <<<"$(tree_pids "$root" | tr '\n' ' ')"
    local outfile=$RESULTS/h2load/handshakes-$target-$round.txt
    before=$(cpu_snapshot "${pids[@]}")
    steal_before=$(steal_snapshot)
    # One descriptor per client: raise the soft limit for h2load when it is below that (as far as the hard limit goes).
    if ! out=$(
        (($(ulimit -n) >= H2_HANDSHAKES + 64)) || ulimit -n $((H2_HANDSHAKES + 64)) 2>/dev/null || true
        timeout --foreground --kill-after=10 120 \
            h2load -t"$threads" -c"$H2_HANDSHAKES" -n"$H2_HANDSHAKES" -m1 "$(target_url "$target")$HIT_PATH" 2>&1
    ); then
        printf '%s\n' "$out" >"$outfile"
        die "h2load (handshakes) failed for $target (output in $outfile)"
    fi
    after=$(cpu_snapshot "${pids[@]}")
    steal=$(steal_pct "$steal_before" "$(steal_snapshot)")
    printf '%s\n' "$out" >"$outfile"
    if ! server_alive "$target"; then
        server_died "$target" "during h2-hit handshakes, round $round"
        die "$target is gone; h2-hit cannot go on"
    fi
    cpu_us=$(cpu_delta_us "$before" "$after")
    local -A r=()
    local kv
    for kv in $(h2load_summary <<<"$out"); do r[${kv%%=*}]=${kv#*=}; done
    [[ ${r[proto]} == h2 ]] || die "h2-hit handshakes/$target: h2load negotiated '${r[proto]}', not h2 (output in $outfile)"
    ((r[done] > 0)) || die "h2load completed no connection for h2-hit handshakes/$target (output in $outfile)"
    [[ -f $RESULTS/h2-handshakes.tsv ]] ||
        printf 'target\tround\tconnections\tsucceeded\terrors\tduration_us\thandshakes_per_s\tcpu_us\tsteal_pct\ttls\tcipher\tkey\n' \
            >"$RESULTS/h2-handshakes.tsv"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$round" "${r[done]}" "${r[succeeded]}" \
        "${r[errors]}" "${r[duration_us]}" "${r[rps]}" "$cpu_us" "$steal" "${r[tls]}" "${r[cipher]}" "${r[key]}" \
        >>"$RESULTS/h2-handshakes.tsv"
    log "$(printf 'h2-hit   %-15s handshakes round %s: %s new TLS connections (one request each) in %.2f s: %s/s, cpu %s µs/handshake, errors %s, %s %s %s' \
        "$target" "$round" "${r[done]}" "$(awk -v u="${r[duration_us]}" 'BEGIN { print u / 1e6 }')" "${r[rps]}" \
        "$(awk -v c="$cpu_us" -v n="${r[done]}" 'BEGIN { printf "%.1f", c / n }')" "${r[errors]}" "${r[tls]}" "${r[cipher]}" "${r[key]}")"
    ((r[errors] == 0)) || note "h2-hit handshakes/$target round $round: ${r[errors]} of ${r[done]} connections failed (output in $outfile)"
}

# h2-hit: the hit URL over TLS + HTTP/2 (ALPN h2), the proxy's TLS listener against nginx's `listen ... ssl http2`
# proxy_cache front, both with the run's self-signed P-256 certificate. h2load keeps H2_CLIENTS connections with
# STREAMS / H2_CLIENTS streams each in flight, for each of H2_STREAMS; each round also measures TLS handshakes per
# second (run_h2_handshakes).
scenario_h2_hit() {
    local targets target round streams got version
    read -ra targets <<<"$H2_TARGETS"
    for target in "${targets[@]}"; do
        [[ $target == proxy-h2 || $target == nginx-h2 ]] || die "h2-hit measures proxy-h2 and nginx-h2, not '$target'"
    done
    start_targets "$CACHE_MB" "${targets[@]}"
    for target in "${targets[@]}"; do
        curl_head "$target" "$HIT_PATH" >/dev/null
        got=$(curl_head "$target" "$HIT_PATH")
        [[ $got == "200 HIT" ]] || die "$target: the second GET $HIT_PATH over h2 answered '$got', expected '200 HIT'"
        version=$(curl -s --max-time 10 --http2 --cacert "$TLS_DIR/cert.pem" -o /dev/null -w '%{http_version}' \
            "$(target_url "$target")$HIT_PATH" || true)
        [[ $version == 2 ]] || die "$target: curl --http2 over TLS got HTTP/${version:-?}, not HTTP/2 (ALPN h2)"
        log "h2-hit $target: $(target_url "$target")$HIT_PATH answers 200 HIT over HTTP/2 (TLS, the run's certificate verified)"
    done
    for target in "${targets[@]}"; do run_h2load h2-hit "$target" 64 warm "$WARMUP"; done
    for ((round = 1; round <= ROUNDS; round++)); do
        for streams in $H2_STREAMS; do
            for target in "${targets[@]}"; do run_h2load h2-hit "$target" "$streams" "$round" "$DURATION"; done
        done
        for target in "${targets[@]}"; do run_h2_handshakes "$target" "$round"; done
    done
    note "h2-hit: h2load -t$H2_THREADS -c$H2_CLIENTS -m<streams ÷ $H2_CLIENTS> over TLS + HTTP/2, the 'streams' column is concurrent streams in all; handshakes: $H2_HANDSHAKES clients at once, one new TLS connection and one request each (-c$H2_HANDSHAKES -n$H2_HANDSHAKES -m1)"
}

# The hit URL at LATENCY_RATE requests/s in all, spread over the connections, for every target: latency compared at
# one offered load. At saturation the faster server also takes more of the CPU the client shares with it, and
# the client's own waits for a core end up in the percentiles.
scenario_latency() {
    local targets target round conns per_connection
    read -ra targets <<<"$LATENCY_TARGETS"
    start_cached latency "${targets[@]}"
    for ((round = 1; round <= ROUNDS; round++)); do
        for conns in $CONNECTIONS; do
            per_connection=$(awk -v r="$LATENCY_RATE" -v c="$conns" 'BEGIN { printf "%.3f", r / c }')
            for target in "${targets[@]}"; do
                run_load latency "$target" "$conns" "$round" "$DURATION" "$HIT_PATH" paced.lua "$per_connection"
            done
        done
    done
}

# Misses: unique URLs. proxy and proxy-uncompressed are one server with two configs: the targets that can run
# together are measured first, round by round, then proxy-uncompressed alone with the others still up (its rows
# are from the same run, later). Both are reported: the proxy's default makes the coding a miss's client takes
# on its pool, none for wrk's (no Accept-Encoding), so the two rows differ by a response's Vary, not by work;
# with compression.eager it would make brotli and gzip for every miss, work nginx and Varnish never do.
scenario_miss() {
    local -a targets together=() later=()
    local target
    if [[ -n $MISS_ACCEPT_ENCODING ]]; then
        WRK_EXTRA=(-H "Accept-Encoding: $MISS_ACCEPT_ENCODING")
        note "miss: every request sent Accept-Encoding: $MISS_ACCEPT_ENCODING (the proxy's default compresses each miss in the coding it takes; the anchors' origin answers in identity)"
    fi
    read -ra targets <<<"$MISS_TARGETS"
    for target in "${targets[@]}"; do
        if [[ $target == proxy-uncompressed && $PROXY_COMPRESSION_SUPPORT != yes ]]; then
            # A binary from before store-time compression: its `proxy` rows are already without it.
            log "miss: skipped: $target: $PROXY_COMPRESSION_DETAIL"
            note "miss: $target skipped: $PROXY_COMPRESSION_DETAIL"
        elif [[ $target == proxy-uncompressed && " ${targets[*]} " == *" proxy "* ]]; then
            later+=("$target")
        else
            together+=("$target")
        fi
    done
    start_targets "$CACHE_MB" "${together[@]}"
    measure_misses "${together[@]}"
    if ((${#later[@]} > 0)); then
        stop_server proxy
        start_targets "$CACHE_MB" "${later[@]}"
        measure_misses "${later[@]}"
    fi
    WRK_EXTRA=()
}

# measure_misses TARGET...: checks that each target answers a unique URL, warms each, then the measured rounds.
measure_misses() {
    local target round conns got
    for target in "$@"; do
        got=$(curl_head "$target" "/screens/bench/check-$RUN_ID-$target?u=1")
        [[ ${got%% *} == 200 ]] || die "$target: a unique GET answered '$got', expected 200"
        [[ $target != proxy* || $got == "200 MISS" ]] || die "$target: a unique GET answered '$got', expected '200 MISS'"
        # nginx's X-Cache is its $upstream_cache_status, Varnish's set by its VCL: MISS shows the request went
        # through the cache.
        [[ $target != nginx && $target != varnish || $got == "200 MISS" ]] ||
            die "$target: a unique GET answered '$got', expected '200 MISS'"
    done
    for target in "$@"; do run_load miss "$target" 64 warm "$WARMUP" / miss.lua "$RUN_ID-warm-$target"; done
    for ((round = 1; round <= ROUNDS; round++)); do
        for conns in $MISS_CONNECTIONS; do
            for target in "$@"; do
                run_load miss "$target" "$conns" "$round" "$DURATION" / miss.lua "$RUN_ID-$round-$conns-$target"
            done
        done
    done
}

# Pass-through: unique GETs under a bypass route (the proxy forwards them, streamed, as nginx without a cache does).
scenario_pass() {
    local targets target round conns got
    read -ra targets <<<"$PASS_TARGETS"
    PROXY_BYPASS_PREFIX=/pass start_targets "$CACHE_MB" "${targets[@]}"
    for target in "${targets[@]}"; do
        got=$(curl_head "$target" "/pass/bench/check-$RUN_ID-$target")
        [[ ${got%% *} == 200 ]] || die "$target: a GET on the bypass route answered '$got', expected 200"
        [[ $target != proxy || $got == "200 BYPASS" ]] || die "proxy: a GET on /pass answered '$got', expected '200 BYPASS'"
    done
    for target in "${targets[@]}"; do run_load pass "$target" 64 warm "$WARMUP" / miss.lua "$RUN_ID-warm-$target" /pass/bench/; done
    for ((round = 1; round <= ROUNDS; round++)); do
        for conns in $PASS_CONNECTIONS; do
            for target in "${targets[@]}"; do
                run_load pass "$target" "$conns" "$round" "$DURATION" / miss.lua "$RUN_ID-$round-$conns-$target" /pass/bench/
            done
        done
    done
}

scenario_mixed() {
    local targets target round conns stats_before stats_after
    read -ra targets <<<"$MIXED_TARGETS"
    start_targets "$MIXED_CACHE_MB" "${targets[@]}"
    # Warm-up fills the caches to their steady state before anything is recorded.
    for target in "${targets[@]}"; do
        run_load mixed "$target" 64 warm "$((WARMUP > 5 ? WARMUP : 5))" / zipf.lua "$MIXED_KEYS" "$ZIPF_S"
    done
    stats_before=$(curl -sf --max-time 5 "http://127.0.0.1:$PROXY_ADMIN_PORT/cache/stats" 2>/dev/null || true)
    for ((round = 1; round <= ROUNDS; round++)); do
        for conns in $MIXED_CONNECTIONS; do
            for target in "${targets[@]}"; do
                run_load mixed "$target" "$conns" "$round" "$DURATION" / zipf.lua "$MIXED_KEYS" "$ZIPF_S"
            done
        done
    done
    if [[ " ${targets[*]} " == *" proxy "* ]]; then
        stats_after=$(curl -sf --max-time 5 "http://127.0.0.1:$PROXY_ADMIN_PORT/cache/stats" 2>/dev/null || true)
        if [[ -n $stats_after ]]; then
            printf '%s\n' "$stats_before" >"$RESULTS/mixed-cache-stats-before.json"
            printf '%s\n' "$stats_after" >"$RESULTS/mixed-cache-stats-after.json"
            note "mixed: proxy GET /cache/stats after the measured runs: $(tr -d '\n' <<<"$stats_after" | cut -c1-400)"
        else
            note "mixed: the proxy has no admin GET /cache/stats (yet); its hit ratio is counted from X-Cache"
        fi
    fi
    note "mixed: $MIXED_KEYS keys of $(wc -c <"$FIXTURE") bytes, Zipf s=$ZIPF_S, every cache limited to $MIXED_CACHE_MB MiB (proxy cache.maxBytes, nginx max_size, Varnish malloc)"
}

scenario_stampede() {
    local target path out count ok
    [[ -f $RESULTS/stampede.tsv ]] || printf 'target\tclients\tanswered\tok\torigin_requests\tx_cache\tfailures\n' >"$RESULTS/stampede.tsv"
    local -a targets
    read -ra targets <<<"$STAMPEDE_TARGETS"
    start_targets "$CACHE_MB" "${targets[@]}"
    for target in "${targets[@]}"; do
        path="/stampede/$RUN_ID-$target"
        log "stampede: $STAMPEDE_CLIENTS concurrent GET $path through $target"
        out=$(timeout --foreground 120 python3 "$BENCH_DIR/tools/stampede.py" --port "$(target_port "$target")" --path "$path" \
            --clients "$STAMPEDE_CLIENTS" --timeout 30) || true
        if ! server_alive "$target"; then
            server_died "$target" "during the stampede"
            die "$target is gone; the stampede cannot go on"
        fi
        [[ -n $out ]] || die "the stampede client printed nothing for $target"
        sleep 0.5
        count=$(grep -cF "\"GET $path " "$RUN_DIR/origin/logs/stampede.log" || true)
        printf '%s\n' "$out" >"$RESULTS/stampede-$target.json"
        ok=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["statuses"].get("200", 0))' "$out")
        python3 -c '
import json, sys
d = json.loads(sys.argv[1])
x = ", ".join(f"{k} {v}" for k, v in sorted(d["x_cache"].items())) or "-"
f = ", ".join(f"{k} {v}" for k, v in sorted(d["failures"].items())) or "-"
print("\t".join([sys.argv[2], str(d["clients"]), str(d["answered"]), sys.argv[3], sys.argv[4], x, f]))
' "$out" "$target" "$ok" "$count" >>"$RESULTS/stampede.tsv"
        log "stampede $target: $out; origin requests: $count"
        [[ $target == proxy ]] && log "stampede origin requests: $count"
        [[ $ok == "$STAMPEDE_CLIENTS" ]] || note "stampede/$target: only $ok of $STAMPEDE_CLIENTS requests got a 200: $out"
    done
}

# fill_entries TARGET OUTFILE MARKER_DIR: wrk with fill.lua in the background. wrk's main thread sleeps for the
# whole -d even when every worker thread has stopped, so once each thread has left its marker (all its keys
# answered) wrk gets SIGINT, which makes it stop and print its summary. Bounded by MEMORY_TIMEOUT.
fill_entries() {
    local target=$1 outfile=$2 markers=$3 wrk_pid waited=0
    wrk -t"$WRK_THREADS" -c64 -d"${MEMORY_TIMEOUT}s" --timeout 5s -s "$LUA_DIR/fill.lua" \
        "http://127.0.0.1:$(target_port "$target")/" -- "$MEMORY_ENTRIES" "$WRK_THREADS" "/screens/fill/$RUN_ID/" \
        "$HIT_PATH" "$markers" >"$outfile" 2>&1 &
    wrk_pid=$!
    while kill -0 "$wrk_pid" 2>/dev/null; do
        if ! server_alive "$target"; then
            kill -INT "$wrk_pid" 2>/dev/null || true
            wait "$wrk_pid" 2>/dev/null || true
            server_died "$target" "while loading entries (memory scenario)"
            return 1
        fi
        if (($(find "$markers" -name 'done-*' | wc -l) >= WRK_THREADS)); then
            kill -INT "$wrk_pid" 2>/dev/null || true
            break
        fi
        if ((waited > (MEMORY_TIMEOUT + 30) * 10)); then
            kill -KILL "$wrk_pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    wait "$wrk_pid" || die "wrk fill failed for $target: $(cat "$outfile")"
    if ! server_alive "$target"; then
        server_died "$target" "while loading entries (memory scenario)"
        return 1
    fi
}

scenario_memory() {
    local target before after line pids misses failed=0
    [[ -f $RESULTS/memory.tsv ]] || printf 'target\tentries\tmisses\trss_before_kb\trss_after_kb\tpayload_bytes\tcache_bytes_per_entry\n' >"$RESULTS/memory.tsv"
    local -a targets
    read -ra targets <<<"$MEMORY_TARGETS"
    for target in "${targets[@]}"; do
        # The proxy with compression off needs a binary that knows the section; an older one is measured as `proxy`.
        if [[ $target == proxy-uncompressed && $PROXY_COMPRESSION_SUPPORT != yes ]]; then
            log "memory: skipped: $target: $PROXY_COMPRESSION_DETAIL"
            note "memory: $target skipped: $PROXY_COMPRESSION_DETAIL; the sdui-proxy row is that binary, without store-time compression"
            [[ $PROXY_COMPRESSION_SUPPORT == no ]] || failed=1
            continue
        fi
        stop_server "$(target_server "$target")" # a fresh process for each measurement
        start_targets "$MEMORY_CACHE_MB" "$target"
        local root
        root=$(registered_pid "$(target_server "$target")")
        # Warm the server's connection handling with one cached key, so the baseline is a running server.
        run_load memory "$target" 64 warm 1 "$HIT_PATH" hit.lua
        sleep 1
        read -ra pids <<<"$(tree_pids "$root" | tr '\n' ' ')"
        before=$(rss_kb "${pids[@]}")
        log "memory $target: loading $MEMORY_ENTRIES distinct entries"
        local out outfile=$RESULTS/wrk/memory-$target-fill.txt markers=$RUN_DIR/fill-markers-$target
        rm -rf "$markers"
        mkdir -p "$markers"
        if ! fill_entries "$target" "$outfile" "$markers"; then
            failed=1
            stop_server "$(target_server "$target")"
            continue
        fi
        out=$(cat "$outfile")
        line=$(grep '^BENCH ' <<<"$out" || true)
        [[ -n $line ]] || die "wrk fill printed no BENCH line for $target (see $outfile)"
        misses=$(sed -n 's/.* misses=\([0-9]*\).*/\1/p' <<<"$line")
        sleep 2
        read -ra pids <<<"$(tree_pids "$root" | tr '\n' ' ')"
        after=$(rss_kb "${pids[@]}")
        # What the proxy's own byte accounting says an entry costs (GET /cache/stats: bytes / entries), if it has one.
        local stats="" accounted=""
        if [[ $(target_server "$target") == proxy ]]; then
            stats=$(curl -sf --max-time 5 "http://127.0.0.1:$PROXY_ADMIN_PORT/cache/stats" 2>/dev/null || true)
            accounted=$(python3 -c 'import json, sys
try:
    d = json.loads(sys.argv[1]); print(round(d["bytes"] / d["entries"]) if d.get("entries") else "")
except Exception:
    print("")' "$stats" 2>/dev/null || true)
            [[ -z $stats ]] || note "memory: $target GET /cache/stats after the fill: $(tr -d '\n' <<<"$stats" | cut -c1-400)"
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$MEMORY_ENTRIES" "$misses" "$before" "$after" "$(wc -c <"$FIXTURE")" \
            "$accounted" >>"$RESULTS/memory.tsv"
        log "memory $target: RSS $((before / 1024)) MiB -> $((after / 1024)) MiB for $misses misses ($line)"
        ((misses >= MEMORY_ENTRIES)) || note "memory/$target: only $misses of $MEMORY_ENTRIES fill requests were misses; bytes/entry is over the entries requested"
        stop_server "$(target_server "$target")"
    done
    return "$failed"
}

# ---- main --------------------------------------------------------------------------------------------------
# instructions: what a hit and a miss cost in CPU instructions, read from the CPU's counters with `perf stat`
# over a wrk run (user space, and user plus kernel). Unlike times, counts hardly move with what else the machine
# runs, so this is the measure for comparing two builds; it needs counters the machine exposes to perf.
scenario_instructions() {
    perf stat -e instructions:u true >/dev/null 2>&1 || die "perf cannot read instruction counters on this machine"
    local targets target round miss_target
    read -ra targets <<<"$INSTRUCTION_TARGETS"
    # nginx answers misses on its no-cache port, which the same server listens on.
    start_targets "$CACHE_MB" "${targets[@]}"
    for target in "${targets[@]}"; do
        curl_head "$target" "$HIT_PATH" >/dev/null
        [[ $(curl_head "$target" "$HIT_PATH") == "200 HIT" ]] || die "$target: $HIT_PATH is not a hit"
    done
    printf 'kind\ttarget\tround\trequests\tuser_instructions\tinstructions\tcycles\n' >"$RESULTS/instructions.tsv"
    for target in "${targets[@]}"; do run_load instructions "$target" "$INSTRUCTION_CONNECTIONS" warm "$WARMUP" "$HIT_PATH" hit.lua; done
    for ((round = 1; round <= ROUNDS; round++)); do
        for target in "${targets[@]}"; do
            count_instructions hit "$target" "$round" "$HIT_PATH" hit.lua
            miss_target=$target
            [[ $target == nginx ]] && miss_target=nginx-nocache
            count_instructions miss "$miss_target" "$round" / miss.lua "$RUN_ID-instructions-$round-$target"
        done
    done
}

# speeds: the miss rate of each target across restarts of the origin. A restart gives every target new backend
# connections (and the origin a new process); on a small shared machine the same binary then runs at one of two
# speeds, and this shows it for each target, with the user-space and kernel instructions and cycles per request
# when perf can count them (the same instructions at more cycles: the work did not change, its cost did).
scenario_speeds() {
    local targets target restart counters=0 requests stat_file
    read -ra targets <<<"$SPEED_TARGETS"
    perf stat -e instructions:k true >/dev/null 2>&1 && counters=1
    ((counters)) || note "speeds: perf cannot count kernel instructions here; rates and CPU only"
    start_targets "$CACHE_MB" "${targets[@]}"
    printf 'target\trestart\trequests\tuser_instructions\tuser_cycles\tkernel_instructions\tkernel_cycles\n' \
        >"$RESULTS/speeds.tsv"
    for ((restart = 1; restart <= SPEED_RESTARTS; restart++)); do
        stop_server origin
        start_origin
        for target in "${targets[@]}"; do
            # Not recorded: it re-opens the backend connections (and lets each target retry a closed one).
            run_load speeds "$target" "$SPEED_CONNECTIONS" warm "$WARMUP" / miss.lua "$RUN_ID-speeds-$restart-warm-$target"
            run_load speeds "$target" "$SPEED_CONNECTIONS" "$restart" "$DURATION" / miss.lua "$RUN_ID-speeds-$restart-$target"
            ((counters)) || continue
            # Counted on its own run, on the same connections, since counting slows the server.
            stat_file=$RESULTS/perf-speeds-$target-$restart.csv
            requests=$(counted_load "$target" "$SPEED_CONNECTIONS" instructions:u,cycles:u,instructions:k,cycles:k \
                "$stat_file" / miss.lua "$RUN_ID-speeds-$restart-counted-$target") ||
                die "wrk failed for speeds/$target (counted run)"
            awk -F, -v target="$target" -v restart="$restart" -v n="$requests" '
                { c[$3] = $1 }
                END {
                    printf "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", target, restart, n,
                        c["instructions:u"], c["cycles:u"], c["instructions:k"], c["cycles:k"]
                }' "$stat_file" >>"$RESULTS/speeds.tsv"
        done
    done
}

# count_instructions KIND TARGET ROUND PATH SCRIPT [ARGS]: one wrk run at INSTRUCTION_CONNECTIONS while perf
# counts the target's processes; appends a line to instructions.tsv.
count_instructions() {
    local kind=$1 target=$2 round=$3 path=$4 script=$5
    shift 5
    local stat_file=$RESULTS/perf-$kind-$target-$round.csv requests
    requests=$(counted_load "$target" "$INSTRUCTION_CONNECTIONS" instructions:u,instructions,cycles "$stat_file" \
        "$path" "$script" "$@") || die "wrk failed for instructions/$kind/$target"
    awk -F, -v kind="$kind" -v target="$target" -v round="$round" -v n="$requests" '
        $3 == "instructions:u" { user = $1 } $3 == "instructions" { all = $1 } $3 == "cycles" { cycles = $1 }
        END {
            if (user == "" || all == "") exit 1
            printf "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", kind, target, round, n, user, all, cycles
        }' "$stat_file" >>"$RESULTS/instructions.tsv" || die "perf counted nothing for instructions/$kind/$target"
    log "$(printf 'instructions %-4s %-14s round %s: %d user-space instructions per request' "$kind" "$target" "$round" \
        "$(tail -1 "$RESULTS/instructions.tsv" | awk -F'\t' '{ printf "%d", $5 / $4 }')")"
}

# counted_load TARGET CONNS EVENTS STAT_FILE PATH SCRIPT [ARGS]: one wrk run of DURATION while `perf stat`
# counts EVENTS in the target's processes into STAT_FILE; prints the number of requests wrk made. Counting slows
# a server down (on a virtual machine, by a third or more), so rates are never taken from these runs.
counted_load() {
    local target=$1 conns=$2 events=$3 stat_file=$4 path=$5 script=$6
    shift 6
    local root pids perf_pid out requests
    root=$(registered_pid "$(target_server "$target")")
    [[ -n $root ]] || die "no running server for $target"
    pids=$(tree_pids "$root" | paste -sd, -)
    perf stat -x, -e "$events" -p "$pids" -o "$stat_file" &
    perf_pid=$!
    out=$(timeout --foreground --kill-after=10 $((DURATION + 30)) \
        wrk -t"$WRK_THREADS" -c"$conns" -d"${DURATION}s" --timeout 5s -s "$LUA_DIR/$script" \
        "http://127.0.0.1:$(target_port "$target")$path" -- "$@" 2>&1) || {
        kill -INT "$perf_pid" 2>/dev/null || true
        return 1
    }
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    requests=$(grep -o 'BENCH requests=[0-9]*' <<<"$out" | cut -d= -f2)
    [[ -n $requests && $requests -gt 0 ]] || return 1
    echo "$requests"
}

main() {
    local scenario rc failed=()
    for scenario in $SCENARIOS; do
        case $scenario in
        hit | hit-gzip | h2-hit | latency | miss | pass | mixed | stampede | memory | instructions | speeds) ;;
        *) die "unknown scenario '$scenario' (hit, hit-gzip, h2-hit, latency, miss, pass, mixed, stampede, memory, instructions, speeds)" ;;
        esac
    done
    [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
    [[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be whole seconds, e.g. 10 or 10s"
    [[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be whole seconds"
    [[ $LATENCY_RATE =~ ^[1-9][0-9]*$ ]] || die "LATENCY_RATE must be a positive number of requests per second"
    ((WARMUP > 0)) || WARMUP=1
    if [[ " $SCENARIOS " == *" h2-hit "* ]]; then
        [[ $H2_CLIENTS =~ ^[1-9][0-9]*$ && $H2_THREADS =~ ^[1-9][0-9]*$ && $H2_HANDSHAKES =~ ^[1-9][0-9]*$ ]] ||
            die "H2_CLIENTS, H2_THREADS and H2_HANDSHAKES must be positive integers"
        [[ $H2_MAX_STREAMS =~ ^[1-9][0-9]*$ ]] || die "H2_MAX_STREAMS must be a positive integer"
        local streams
        for streams in $H2_STREAMS 64; do
            [[ $streams =~ ^[1-9][0-9]*$ ]] && ((streams % H2_CLIENTS == 0)) ||
                die "H2_STREAMS: $streams concurrent streams cannot be split evenly over H2_CLIENTS=$H2_CLIENTS connections"
            ((streams / H2_CLIENTS <= H2_MAX_STREAMS)) ||
                die "H2_STREAMS: $((streams / H2_CLIENTS)) streams per connection is over H2_MAX_STREAMS=$H2_MAX_STREAMS"
        done
    fi

    mkdir -p "$RUN_DIR" "$RESULTS/wrk" "$RESULTS/h2load"
    if [[ -s $REGISTRY ]]; then
        log "a previous run left a registry behind; stopping what it recorded"
        stop_all
    fi
    : >"$REGISTRY"
    rm -rf "$TLS_DIR" # a fresh certificate for each run (made when a TLS front starts)
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    ensure_tools
    build_proxy
    probe_proxy_compression
    printf 'scenario\ttarget\tconns\tround\trequests\tduration_us\trps\tp50_us\tp99_us\terrors\tcpu_us\trss_kb\thits\tmisses\tother\tsteal_pct\tconn_split\tbytes\tsys_us\n' >"$RESULTS/runs.tsv"
    : >"$RESULTS/notes.txt"
    {
        echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "cpus=$(nproc)"
        echo "wrk_threads=$WRK_THREADS"
        echo "rounds=$ROUNDS"
        echo "duration=${DURATION}s"
        echo "payload_bytes=$(wc -c <"$FIXTURE")"
        echo "scenarios=$SCENARIOS"
        echo "latency_rate=$LATENCY_RATE"
        echo "proxy_compression=$PROXY_COMPRESSION_SUPPORT"
        echo "h2_clients=$H2_CLIENTS"
        echo "h2_threads=$H2_THREADS"
        echo "h2_handshakes=$H2_HANDSHAKES"
        echo "h2_max_streams=$H2_MAX_STREAMS"
    } >"$RESULTS/meta.txt"
    log "run $RUN_ID: scenarios '$SCENARIOS', $ROUNDS round(s) of ${DURATION}s, connections '$CONNECTIONS'; results in $RESULTS"
    log "proxy $BIN ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')), $(nginx -v 2>&1), $(varnishd -V 2>&1 | head -1), $(wrk -v 2>&1 | head -1 | cut -c1-40)"
    [[ " $SCENARIOS " != *" h2-hit "* ]] || log "$(h2load --version 2>&1 | head -1), $(openssl version 2>&1)"

    start_origin
    for scenario in $SCENARIOS; do
        log "=== scenario: $scenario"
        # Each scenario runs in a subshell of its own, in the background, so that a failure ends only that
        # scenario and a signal (Ctrl-C, TERM) interrupts the `wait` at once; cleanup then ends the subshell.
        (
            set -e
            "scenario_${scenario//-/_}"
        ) &
        SCENARIO_PID=$!
        set +e
        wait "$SCENARIO_PID"
        rc=$?
        set -e
        SCENARIO_PID=
        stop_all_but_origin
        if ((rc != 0)); then
            ((rc == 130 || rc == 143)) && exit "$rc"
            failed+=("$scenario")
            note "scenario $scenario FAILED (exit $rc); see the log above and $RUN_DIR"
            log "scenario $scenario failed (exit $rc); going on with the next one"
        fi
    done
    stop_all

    python3 "$BENCH_DIR/tools/report.py" "$RESULTS" | tee "$RESULTS/report.md"
    log "report saved to $RESULTS/report.md"
    ((${#failed[@]} == 0)) || {
        log "failed scenarios: ${failed[*]}"
        return 1
    }
}

main "$@"
