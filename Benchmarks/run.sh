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
#
# stdout carries only the final report (markdown); progress goes to stderr. The last line on stdout is always
#   hit-cpu-per-request ratio vs nginx: X.XX
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
MISS_TARGETS=${MISS_TARGETS:-"proxy nginx-nocache nginx"}
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

SCENARIO_PID=
PROXY_COMPRESSION_SUPPORT=unknown # yes, no or refused: set by probe_proxy_compression
PROXY_COMPRESSION_DETAIL="not probed"
RUN_ID=$(date +%Y%m%d-%H%M%S)-$$
RUN_DIR=$WORK_DIR/run
RESULTS=$WORK_DIR/results/$RUN_ID
REGISTRY=$RUN_DIR/pids
FIXTURE=$BENCH_DIR/fixtures/screen.json
LUA_DIR=$BENCH_DIR/lua
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
    local url=$1 pid=$2 name=$3 limit=${4:-30} waited=0
    while ! curl -s -o /dev/null --max-time 1 "$url"; do
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
        # After "(comm) ", index 0 is field 3 (state): utime is field 14, stime field 15.
        printf '%s %s\n' "$p" $((f[11] + f[12]))
    done
}

# cpu_delta_us BEFORE AFTER: CPU µs used between two snapshots, summed over PIDs present in both.
cpu_delta_us() {
    awk -v tck="$CLK_TCK" 'NR == FNR { b[$1] = $2; next } ($1 in b) { d += $2 - b[$1] } END { printf "%d\n", d * 1000000 / tck }' \
        <(printf '%s\n' "$1") <(printf '%s\n' "$2")
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
    varnish | varnish-gzip) echo "$VARNISH_PORT" ;;
    *) die "unknown target $1" ;;
    esac
}

# The registry name of the server that answers for a target. proxy-uncompressed (store-time compression off) and
# varnish-gzip (JSON stored gzipped) are the proxy and Varnish started with another config.
target_server() {
    case $1 in
    nginx-nocache | nginx-reuseport | nginx-gzip) echo nginx ;;
    proxy-uncompressed) echo proxy ;;
    varnish-gzip) echo varnish ;;
    *) echo "$1" ;;
    esac
}

server_log() {
    case $1 in
    proxy) echo "$RUN_DIR/proxy/proxy.log" ;;
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

# start_proxy MAX_MB (PROXY_COMPRESSION, when set, is the config's compression section)
start_proxy() {
    local mb=$1 dir=$RUN_DIR/proxy
    require_free_port "$PROXY_PORT" proxy
    require_free_port "$PROXY_ADMIN_PORT" "proxy admin"
    mkdir -p "$dir"
    gen_proxy_yaml "$dir/sdui-proxy.yaml" "$PROXY_PORT" "$PROXY_ADMIN_PORT" "$ORIGIN_PORT" "${mb}MiB"
    printf '=== %s: start, cache %s MiB, compression %s, %s\n' "$(date +%T)" "$mb" "${PROXY_COMPRESSION:-default}" "$BIN" \
        >>"$dir/proxy.log"
    "$BIN" --config "$dir/sdui-proxy.yaml" >>"$dir/proxy.log" 2>&1 &
    register proxy $!
    wait_http "http://127.0.0.1:$PROXY_ADMIN_PORT/health" "$!" proxy
    wait_http "http://127.0.0.1:$PROXY_PORT/ready" "$!" proxy
    log "sdui-proxy on :$PROXY_PORT (admin :$PROXY_ADMIN_PORT, cache ${mb} MiB, compression ${PROXY_COMPRESSION:-default})," \
        "pid $(registered_pid proxy)"
}

# start_nginx MAX_MB [GZIP_PORT]: the proxy_cache server and the no-cache server, one nginx instance; with
# GZIP_PORT, also the proxy_cache server that gzips at every hit (the hit-gzip scenario's nginx).
start_nginx() {
    local mb=$1 gzip_port=${2:-} dir=$RUN_DIR/nginx
    require_free_port "$NGINX_PORT" nginx
    require_free_port "$NGINX_NOCACHE_PORT" "nginx no-cache"
    require_free_port "$NGINX_REUSEPORT_PORT" "nginx reuseport"
    [[ -z $gzip_port ]] || require_free_port "$gzip_port" "nginx gzip"
    rm -rf "$dir"
    gen_nginx_conf "$dir" "$NGINX_PORT" "$NGINX_NOCACHE_PORT" "$NGINX_REUSEPORT_PORT" "$ORIGIN_PORT" "${mb}m" "$gzip_port"
    nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" >"$dir/stdout.log" 2>&1 &
    register nginx $!
    wait_http "http://127.0.0.1:$NGINX_PORT/ready" "$!" nginx
    wait_http "http://127.0.0.1:$NGINX_NOCACHE_PORT/ready" "$!" nginx
    wait_http "http://127.0.0.1:$NGINX_REUSEPORT_PORT/ready" "$!" nginx
    [[ -z $gzip_port ]] || wait_http "http://127.0.0.1:$gzip_port/ready" "$!" nginx
    log "nginx proxy_cache on :$NGINX_PORT (and with reuseport on :$NGINX_REUSEPORT_PORT), no cache on" \
        ":$NGINX_NOCACHE_PORT${gzip_port:+, proxy_cache with gzip on :$gzip_port} (max_size ${mb}m), pid $(registered_pid nginx)"
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
    local mb=$1 target server started=" " nginx_gzip_port=""
    shift
    [[ " $* " != *" proxy "* || " $* " != *" proxy-uncompressed "* ]] ||
        die "proxy and proxy-uncompressed are one server with two configs; they cannot be started together"
    [[ " $* " != *" varnish "* || " $* " != *" varnish-gzip "* ]] ||
        die "varnish and varnish-gzip are one server with two configs; they cannot be started together"
    [[ " $* " != *" nginx-gzip "* ]] || nginx_gzip_port=$NGINX_GZIP_PORT
    for target in "$@"; do
        server=$(target_server "$target")
        [[ $started == *" $server "* ]] && continue
        case $target in
        proxy) start_proxy "$mb" ;;
        proxy-uncompressed) PROXY_COMPRESSION='{ encodings: [] }' start_proxy "$mb" ;;
        nginx | nginx-*) start_nginx "$mb" "$nginx_gzip_port" ;;
        varnish) start_varnish "$mb" ;;
        varnish-gzip) start_varnish "$mb" gzip ;;
        esac
        started+="$server "
    done
}

# ---- measuring ---------------------------------------------------------------------------------------------
# curl_head TARGET PATH: "STATUS XCACHE" of one GET.
curl_head() {
    local headers status xcache
    headers=$(curl -s --max-time 10 -D - -o /dev/null "http://127.0.0.1:$(target_port "$1")$2") || {
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
    local root pids before after out cpu_us rss line steal_before steal split_file split sampler
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
        wrk -t"$WRK_THREADS" -c"$conns" -d"${seconds}s" --timeout 5s -s "$LUA_DIR/$script" "$url" -- "$@" 2>&1); then
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
    read -ra pids <<<"$(tree_pids "$root" | tr '\n' ' ')"
    rss=$(rss_kb "${pids[@]}")
    line=$(grep '^BENCH ' <<<"$out" || true)
    [[ -n $line ]] || die "wrk printed no BENCH line for $scenario/$target/c$conns (output in $outfile)"
    local -A r=()
    local kv
    for kv in ${line#BENCH }; do r[${kv%%=*}]=${kv#*=}; done
    local per_req=n/a bytes_per_response=n/a
    ((r[requests] > 0)) && per_req=$(awk -v c="$cpu_us" -v n="${r[requests]}" 'BEGIN { printf "%.1f", c / n }')
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
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$scenario" "$target" "$conns" "$round" "${r[requests]}" "${r[duration_us]}" "${r[rps]}" "${r[p50_us]}" \
        "${r[p99_us]}" "${r[errors]}" "$cpu_us" "$rss" "${r[hits]}" "${r[misses]}" "${r[other]}" "$steal" "$split" \
        "${r[bytes]}" >>"$RESULTS/runs.tsv"
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
# Content-Encoding: gzip and a body that gunzips to the fixture. Anything else ends the scenario, so a run never
# compares an identity answer with a gzip one. What it saw goes to gzip-check.tsv.
check_gzip_hit() {
    local target=$1 url headers status xcache encoding vary length same
    local body=$RUN_DIR/gzip-check-$target.body
    url="http://127.0.0.1:$(target_port "$target")$HIT_PATH"
    curl_head "$target" "$HIT_PATH" >/dev/null
    curl -s --max-time 10 -H 'Accept-Encoding: gzip' -o /dev/null "$url" || true
    headers=$(curl -s --max-time 10 -H 'Accept-Encoding: gzip' -D - -o "$body" "$url") ||
        die "$target: GET $HIT_PATH with Accept-Encoding: gzip failed (curl exit $?)"
    status=$(awk 'NR == 1 { print $2 }' <<<"$headers")
    xcache=$(header_value X-Cache <<<"$headers")
    encoding=$(header_value Content-Encoding <<<"$headers")
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

scenario_miss() {
    local targets target round conns got
    read -ra targets <<<"$MISS_TARGETS"
    start_targets "$CACHE_MB" "${targets[@]}"
    for target in "${targets[@]}"; do
        got=$(curl_head "$target" "/screens/bench/check-$RUN_ID-$target?u=1")
        [[ ${got%% *} == 200 ]] || die "$target: a unique GET answered '$got', expected 200"
        [[ $target != proxy || $got == "200 MISS" ]] || die "proxy: a unique GET answered '$got', expected '200 MISS'"
        # nginx's X-Cache is its $upstream_cache_status: MISS shows the request went through its cache.
        [[ $target != nginx || $got == "200 MISS" ]] || die "nginx: a unique GET answered '$got', expected '200 MISS'"
    done
    for target in "${targets[@]}"; do run_load miss "$target" 64 warm "$WARMUP" / miss.lua "$RUN_ID-warm-$target"; done
    for ((round = 1; round <= ROUNDS; round++)); do
        for conns in $MISS_CONNECTIONS; do
            for target in "${targets[@]}"; do
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
        hit | hit-gzip | latency | miss | pass | mixed | stampede | memory | instructions | speeds) ;;
        *) die "unknown scenario '$scenario' (hit, hit-gzip, latency, miss, pass, mixed, stampede, memory, instructions, speeds)" ;;
        esac
    done
    [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
    [[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be whole seconds, e.g. 10 or 10s"
    [[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be whole seconds"
    [[ $LATENCY_RATE =~ ^[1-9][0-9]*$ ]] || die "LATENCY_RATE must be a positive number of requests per second"
    ((WARMUP > 0)) || WARMUP=1

    mkdir -p "$RUN_DIR" "$RESULTS/wrk"
    if [[ -s $REGISTRY ]]; then
        log "a previous run left a registry behind; stopping what it recorded"
        stop_all
    fi
    : >"$REGISTRY"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    ensure_tools
    build_proxy
    probe_proxy_compression
    printf 'scenario\ttarget\tconns\tround\trequests\tduration_us\trps\tp50_us\tp99_us\terrors\tcpu_us\trss_kb\thits\tmisses\tother\tsteal_pct\tconn_split\tbytes\n' >"$RESULTS/runs.tsv"
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
    } >"$RESULTS/meta.txt"
    log "run $RUN_ID: scenarios '$SCENARIOS', $ROUNDS round(s) of ${DURATION}s, connections '$CONNECTIONS'; results in $RESULTS"
    log "proxy $BIN ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')), $(nginx -v 2>&1), $(varnishd -V 2>&1 | head -1), $(wrk -v 2>&1 | head -1 | cut -c1-40)"

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
