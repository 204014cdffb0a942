#!/usr/bin/env bash
# Instructions the proxy executes per cache miss (with KIND=hit, per hit; with KIND=pass, per GET forwarded on a
# bypass route, the pass-through path), counted by callgrind:
# deterministic, unlike a timed run, so a change to the miss or hit path can be judged by one number, also on
# machines where perf cannot read the CPU's counters.
#
#   BIN=.build-release/release/sdui-proxy Benchmarks/tools/miss-instructions.sh
#   WARMUP=300 MISSES=2000 BIN=... Benchmarks/tools/miss-instructions.sh
#   KIND=hit MISSES=20000 BIN=... Benchmarks/tools/miss-instructions.sh   # one URL, stored by the warm-up
#   KIND=pass BIN=... Benchmarks/tools/miss-instructions.sh                # unique URLs under a bypass route
#   KIND=hit ACCEPT_ENCODING=gzip BIN=... Benchmarks/tools/miss-instructions.sh   # hits of the stored gzip form
#   KIND=hit HTTP2=1 MISSES=5000 BIN=... Benchmarks/tools/miss-instructions.sh    # the same over HTTP/2 (h2load)
#   CALLGRIND_ARGS=--dump-instr=yes BIN=... Benchmarks/tools/miss-instructions.sh
#   YIELD_AFTER=250us BIN=... Benchmarks/tools/miss-instructions.sh   # the default config's yield window (see below)
#   CALLGRIND_ARGS=--separate-threads=yes BIN=... Benchmarks/tools/miss-instructions.sh   # also the busiest thread alone
#   ANCHOR=nginx KIND=hit HTTP2=1 MISSES=5000 Benchmarks/tools/miss-instructions.sh   # nginx doing the same job
#
# With ANCHOR=nginx the process measured is nginx (one process, no master) instead of the proxy, with the same
# origin and the same client: `proxy_cache` for hits (h2c when HTTP2=1), no cache for misses and passes, the
# anchors the README's tables compare with. nginx reads its cached files with system calls, which callgrind does
# not count: its number is the user-space part of its work only.
#
# Starts the benchmark origin (nginx serving Benchmarks/fixtures/screen.json, see lib/configs.sh) and the proxy
# under `valgrind --tool=callgrind`, sends WARMUP misses (unique URLs) on one keep-alive connection, zeroes the
# counters, sends MISSES more, dumps them, and prints
#   instructions per miss: N
# (the proxy's whole process, every thread, user space only). It builds nothing; it installs valgrind or nginx
# with apt-get only when one is missing. Everything it starts is stopped by PID on exit, error or Ctrl-C; the
# callgrind profile is kept (its path is printed) for `callgrind_annotate --inclusive=yes`.
set -euo pipefail

TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_DIR=$(cd "$TOOLS_DIR/.." && pwd)
# shellcheck source=../lib/configs.sh
source "$BENCH_DIR/lib/configs.sh"

BIN=${BIN:-}
KIND=${KIND:-miss}
# nginx: measure nginx doing the same job instead of the proxy (BIN is then not needed).
ANCHOR=${ANCHOR:-}
# Sent as Accept-Encoding with every request when set; a hit must then come back in that coding.
ACCEPT_ENCODING=${ACCEPT_ENCODING:-}
# 1: the requests go over HTTP/2 with prior knowledge (h2c), by h2load on one connection, one stream at a time.
HTTP2=${HTTP2:-0}
WARMUP=${WARMUP:-300}
MISSES=${MISSES:-2000}
ORIGIN_PORT=${ORIGIN_PORT:-18300}
PROXY_PORT=${PROXY_PORT:-18380}
PROXY_ADMIN_PORT=${PROXY_ADMIN_PORT:-19390}
WORK_DIR=${WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/sdui-miss-instructions.XXXXXX")}
# mktemp makes the directory private to its owner; nginx workers (nobody, when run as root) read the fixture in it.
mkdir -p "$WORK_DIR"
chmod 755 "$WORK_DIR"
START_TIMEOUT=${START_TIMEOUT:-120}
# More callgrind options, e.g. CALLGRIND_ARGS=--dump-instr=yes to see costs per instruction (slower).
# The proxy's eventLoops.yieldAfter under callgrind (see start_proxy).
YIELD_AFTER=${YIELD_AFTER:-100ms}
CALLGRIND_ARGS=${CALLGRIND_ARGS:-}
FIXTURE=$BENCH_DIR/fixtures/screen.json

log() { printf '[miss-instructions %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

[[ -z $ANCHOR || $ANCHOR == nginx ]] || die "ANCHOR must be nginx, or unset to measure the proxy"
if [[ -z $ANCHOR ]]; then
    [[ -n $BIN ]] || die "set BIN to a release build of sdui-proxy (swift build -c release --product sdui-proxy)"
    [[ -x $BIN ]] || die "BIN=$BIN is not an executable"
    BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
fi
[[ $WARMUP =~ ^[0-9]+$ && $MISSES =~ ^[1-9][0-9]*$ ]] || die "WARMUP and MISSES must be whole numbers (MISSES > 0)"
[[ $KIND == miss || $KIND == hit || $KIND == pass ]] || die "KIND must be miss, hit or pass"

missing=()
command -v valgrind >/dev/null || missing+=(valgrind)
command -v nginx >/dev/null || missing+=(nginx)
command -v curl >/dev/null || missing+=(curl)
command -v strip >/dev/null || missing+=(binutils)
command -v cc >/dev/null || missing+=(gcc)
command -v python3 >/dev/null || missing+=(python3)
[[ $HTTP2 != 1 ]] || command -v h2load >/dev/null || missing+=(nghttp2-client)
if ((${#missing[@]} > 0)); then
    [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || die "missing: ${missing[*]}; install them"
    log "installing ${missing[*]} (apt-get)"
    timeout 600 apt-get update -qq >&2
    RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}" >&2
fi

ORIGIN_PID=
PROXY_PID=
stop_pid() {
    local pid=$1 waited=0
    [[ -n $pid ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null && ((waited < 100)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_pid "$PROXY_PID"
    stop_pid "$ORIGIN_PID"
    exit "$rc"
}
trap cleanup EXIT INT TERM

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "$ORIGIN_PORT" "$PROXY_PORT" "$PROXY_ADMIN_PORT"; do
    port_in_use "$port" && die "port $port is in use on 127.0.0.1; set ORIGIN_PORT, PROXY_PORT, PROXY_ADMIN_PORT"
done

# wait_http URL PID NAME [CURL_ARG...]: until URL answers at all, the process dies, or START_TIMEOUT runs out.
wait_http() {
    local url=$1 pid=$2 name=$3 waited=0
    shift 3
    while ! curl -s -o /dev/null --max-time 2 "$@" "$url"; do
        kill -0 "$pid" 2>/dev/null || die "$name exited during start-up; see $WORK_DIR"
        ((waited < START_TIMEOUT * 10)) || die "$name did not answer $url within ${START_TIMEOUT}s"
        sleep 0.1
        waited=$((waited + 1))
    done
}

log "work directory $WORK_DIR"
origin_dir=$WORK_DIR/origin
mkdir -p "$origin_dir/www"
cp "$FIXTURE" "$origin_dir/www/screen.json"
ORIGIN_WORKERS=1 gen_origin_conf "$origin_dir" "$ORIGIN_PORT" "$origin_dir/www"
nginx -p "$origin_dir" -c "$origin_dir/nginx.conf" -e "$origin_dir/logs/error.log" >"$origin_dir/stdout.log" 2>&1 &
ORIGIN_PID=$!
wait_http "http://127.0.0.1:$ORIGIN_PORT/ready" "$ORIGIN_PID" origin

proxy_dir=$WORK_DIR/proxy
mkdir -p "$proxy_dir"
# A WORK_DIR used before may hold another run's per-thread dumps, which the total below would add in.
rm -f "$proxy_dir"/callgrind.out*

# start_proxy: the proxy under callgrind on PROXY_PORT.
start_proxy() {
    # Valgrind 3.19 (Debian 12) gives up on the DWARF 5 that Swift 6 emits: it runs a copy without the debug
    # sections, whose symbol table still names every function.
    strip --strip-debug -o "$proxy_dir/sdui-proxy" "$BIN"
    # It also crashes when a program waits in sigsuspend with its mask in read-only memory, as libdispatch's main
    # thread does (Valgrind writes to the mask): a preloaded sigsuspend hands the kernel a copy on the stack.
    cat >"$proxy_dir/sigsuspend-copy.c" <<'C'
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, 8);
}
C
    cc -shared -fPIC -O2 -o "$proxy_dir/sigsuspend-copy.so" "$proxy_dir/sigsuspend-copy.c"
    gen_proxy_yaml "$proxy_dir/sdui-proxy.yaml" "$PROXY_PORT" "$PROXY_ADMIN_PORT" "$ORIGIN_PORT" 256MiB
    # Under callgrind the proxy runs about fifty times slower, so a busy loop's yield window (eventLoops.yieldAfter,
    # 250us of wall time) would end after nearly every request instead of every fifty or so: the window's own work
    # would be counted fifty times over. 100ms (the most the config takes) makes it rarer than natively instead.
    echo "eventLoops: { yieldAfter: $YIELD_AFTER }" >>"$proxy_dir/sdui-proxy.yaml"
    if [[ $KIND == pass ]]; then
        sed -i 's|^cache: { maxBytes: 256MiB }$|cache: { maxBytes: 256MiB, routes: [{ prefix: /pass, bypass: true }] }|' \
            "$proxy_dir/sdui-proxy.yaml"
        grep -q 'bypass: true' "$proxy_dir/sdui-proxy.yaml" || die "could not add the bypass route to the proxy's config"
    fi
    LD_PRELOAD=$proxy_dir/sigsuspend-copy.so valgrind --tool=callgrind --dump-instr=no --compress-strings=no \
        --compress-pos=no --callgrind-out-file="$proxy_dir/callgrind.out" $CALLGRIND_ARGS \
        "$proxy_dir/sdui-proxy" --config "$proxy_dir/sdui-proxy.yaml" >"$proxy_dir/proxy.log" 2>&1 &
    PROXY_PID=$!
    wait_http "http://127.0.0.1:$PROXY_ADMIN_PORT/health" "$PROXY_PID" proxy
    wait_http "http://127.0.0.1:$PROXY_PORT/ready" "$PROXY_PID" proxy
}

# How curl reaches nginx's port: h2c with HTTP2=1, as nginx then speaks nothing else.
nginx_curl=()
[[ $HTTP2 == 1 ]] && nginx_curl=(--http2-prior-knowledge)

# start_nginx: nginx under callgrind on PROXY_PORT, one process (no master): proxy_cache for hits, keyed as the
# proxy keys them, as in Benchmarks/run.sh; no cache for misses and passes. With HTTP2=1 it listens for h2c (nginx 1.22's
# `listen ... http2` without TLS).
start_nginx() {
    mkdir -p "$proxy_dir/logs" "$proxy_dir/cache" "$proxy_dir/tmp"
    local listen_http2='' location
    [[ $HTTP2 == 1 ]] && listen_http2=' http2'
    # A hit's location is the load benchmark's nginx anchor's.
    if [[ $KIND == hit ]]; then
        location=$(_nginx_cached_location)
    else
        location='        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }'
    fi
    cat >"$proxy_dir/nginx.conf" <<NGINX
# generated by Benchmarks/tools/miss-instructions.sh: nginx under callgrind
daemon off;
master_process off;
worker_processes 1;
pid $proxy_dir/nginx.pid;
error_log $proxy_dir/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 10000000;
$(_nginx_temp_paths "$proxy_dir")
    proxy_cache_path $proxy_dir/cache levels=1:2 keys_zone=sdui:64m max_size=256m inactive=1d use_temp_path=off;
    upstream origin {
        server 127.0.0.1:$ORIGIN_PORT;
        keepalive 64;
        keepalive_requests 10000000;
    }
    server {
        listen 127.0.0.1:$PROXY_PORT$listen_http2;
$location
    }
}
NGINX
    valgrind --tool=callgrind --dump-instr=no --compress-strings=no --compress-pos=no \
        --callgrind-out-file="$proxy_dir/callgrind.out" $CALLGRIND_ARGS \
        nginx -p "$proxy_dir" -c "$proxy_dir/nginx.conf" -e "$proxy_dir/logs/error.log" >"$proxy_dir/proxy.log" 2>&1 &
    PROXY_PID=$!
    wait_http "http://127.0.0.1:$PROXY_PORT/ready" "$PROXY_PID" nginx "${nginx_curl[@]}"
}

if [[ $ANCHOR == nginx ]]; then start_nginx; else start_proxy; fi
log "origin pid $ORIGIN_PID on :$ORIGIN_PORT, ${ANCHOR:-proxy} (callgrind) pid $PROXY_PID on :$PROXY_PORT"

# requests PREFIX COUNT: COUNT GETs on one keep-alive connection, each a 200 of KIND: for misses and passes,
# never-seen URLs; for hits, one URL, which the warm-up's first request stores.
requests() {
    if [[ $HTTP2 == 1 ]]; then
        requests_h2 "$@"
        return
    fi
    python3 - "$PROXY_PORT" "$KIND" "$1" "$2" "$ACCEPT_ENCODING" "$ANCHOR" <<'EOF'
import http.client, sys
port, kind, prefix, count, coding = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
anchor = sys.argv[6]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
headers = {"beagle-platform": "IOS"}
if coding:
    headers["Accept-Encoding"] = coding
for i in range(count):
    target = {"miss": f"/screens/{prefix}/{i}?u={i}", "pass": f"/pass/{prefix}/{i}", "hit": "/screens/hit"}[kind]
    conn.request("GET", target, headers=headers)
    response = conn.getresponse()
    body = response.read()
    expected = "HIT" if kind == "hit" and not (prefix.startswith("warm") and i == 0) else "MISS"
    if kind == "pass":
        expected = "BYPASS"
    if anchor == "nginx" and kind != "hit":
        expected = None  # nginx without a cache adds no X-Cache
    if response.status != 200 or response.getheader("X-Cache") != expected or not body:
        sys.exit(f"request {i}: status {response.status}, X-Cache {response.getheader('X-Cache')}")
    if coding and expected == "HIT" and response.getheader("Content-Encoding") != coding:
        sys.exit(f"request {i}: Content-Encoding {response.getheader('Content-Encoding')}, not {coding}")
conn.close()
EOF
}

# requests_h2 PREFIX COUNT: the same over HTTP/2, each request a stream of one connection. h2load asks for one
# URL (a hit's) or a list of never-seen ones; every stream must end in a 2xx. h2load reads no response fields, so
# after a hit's warm-up one more request, by curl, checks that the URL is a hit (in the asked coding).
requests_h2() {
    local prefix=$1 count=$2 list=$proxy_dir/h2-targets-$1 i
    local -a args=(-c 1 -m 1 -H "beagle-platform: IOS")
    [[ -n $ACCEPT_ENCODING ]] && args+=(-H "accept-encoding: $ACCEPT_ENCODING")
    case $KIND in
    hit) args+=(-n "$count" "http://127.0.0.1:$PROXY_PORT/screens/hit") ;;
    *)
        : >"$list"
        for ((i = 0; i < count; i++)); do
            if [[ $KIND == pass ]]; then
                echo "http://127.0.0.1:$PROXY_PORT/pass/$prefix/$i" >>"$list"
            else
                echo "http://127.0.0.1:$PROXY_PORT/screens/$prefix/$i?u=$i" >>"$list"
            fi
        done
        args+=(-n "$count" -i "$list")
        ;;
    esac
    h2load "${args[@]}" >"$proxy_dir/h2load-$prefix.log" 2>&1 || die "h2load failed: $(tail -5 "$proxy_dir/h2load-$prefix.log")"
    grep -q "status codes: $count 2xx," "$proxy_dir/h2load-$prefix.log" ||
        die "not every HTTP/2 request had a 2xx: $(grep -E '^requests:|^status codes:' "$proxy_dir/h2load-$prefix.log")"
    if [[ $KIND == hit && $prefix == warm-* ]]; then
        local -a check=(-s --http2-prior-knowledge -D - -o /dev/null -H "beagle-platform: IOS")
        [[ -n $ACCEPT_ENCODING ]] && check+=(-H "accept-encoding: $ACCEPT_ENCODING")
        local head
        head=$(curl "${check[@]}" "http://127.0.0.1:$PROXY_PORT/screens/hit" | tr -d '\r')
        grep -qi '^x-cache: HIT$' <<<"$head" || die "the HTTP/2 warm-up left no hit: $head"
        if [[ -n $ACCEPT_ENCODING ]]; then
            grep -qi "^content-encoding: $ACCEPT_ENCODING\$" <<<"$head" || die "the HTTP/2 hit is not in $ACCEPT_ENCODING: $head"
        fi
    fi
}

# callgrind_control waits for the process to look at its command file, which a thread does when it runs; a
# thread asleep in epoll does not. A ping to the admin port (its own event loop) wakes one; nginx, a request.
wake() {
    if [[ $ANCHOR == nginx ]]; then
        curl -s -o /dev/null --max-time 2 "${nginx_curl[@]}" "http://127.0.0.1:$PROXY_PORT/ready"
    else
        curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$PROXY_ADMIN_PORT/health"
    fi
}
control() {
    callgrind_control "$@" "$PROXY_PID" >"$proxy_dir/control.log" 2>&1 &
    local control_pid=$! tries=0
    while kill -0 "$control_pid" 2>/dev/null && ((tries < 600)); do
        sleep 0.1
        tries=$((tries + 1))
        ((tries % 10 == 0)) && wake || true
    done
    wait "$control_pid" || die "callgrind_control $* failed: $(cat "$proxy_dir/control.log")"
}

run_id=$(date +%s)-$$
if [[ $KIND == hit ]] && ((WARMUP == 0)); then WARMUP=1; fi
if ((WARMUP > 0)); then
    log "warm-up: $WARMUP requests"
    requests "warm-$run_id" "$WARMUP"
fi
control --zero
log "measured: $MISSES ${KIND}s"
requests "measured-$run_id" "$MISSES"
control --dump=measured

# The measured dump is one file, or with CALLGRIND_ARGS=--separate-threads=yes one per thread: the total is their
# sum, and the busiest thread's share (an event loop's, on one keep-alive connection) is printed beside it.
mapfile -t profiles < <(grep -l '^desc: Trigger: .*measured' "$proxy_dir"/callgrind.out*)
((${#profiles[@]} > 0)) || die "no callgrind dump for the measured batch in $proxy_dir"
total=0
busiest=
busiest_total=-1
for profile in "${profiles[@]}"; do
    count=$(awk '/^(summary|totals):/ { print $2; exit }' "$profile")
    [[ -n $count ]] || die "no instruction total in $profile"
    total=$((total + count))
    if ((count > busiest_total)); then
        busiest=$profile
        busiest_total=$count
    fi
done
log "profile: $busiest (callgrind_annotate --inclusive=yes $busiest)"
echo "instructions: $total for $MISSES ${KIND}s"
if ((${#profiles[@]} > 1)); then
    echo "instructions per $KIND on the busiest thread: $((busiest_total / MISSES))"
fi
echo "instructions per $KIND: $((total / MISSES))"
