#!/usr/bin/env bash
# Builds the release binary the way Docker/Dockerfile does and runs it laid out like the image, for machines
# (and CI) without a Docker engine:
#
#   1. `swift build -c release --static-swift-stdlib` (the Dockerfile's command, same flags), on the versions this
#      checkout resolved, which CI checks are the image's (Docker/Package.pins, scripts/pin-dependencies.py --check);
#   2. the binary copied to <tmp>/usr/local/bin, the bundled config to <tmp>/etc/sdui-proxy/sdui-proxy.yaml and
#      the samples to <tmp>/usr/share/sdui-proxy/config/samples, the working directory set to
#      <tmp>/usr/share/sdui-proxy;
#   3. `sdui-proxy --check-config --config <tmp>/etc/sdui-proxy/sdui-proxy.yaml`, and `--print-config` with the
#      environment Docker/docker-compose.yml gives its proxy: the volume it mounts for queued writes must hold
#      the queue the configuration in force has;
#   4. two proxies started on that config with free loopback ports: an origin serving the samples from its files,
#      and in front of it, the proxy under test with `--upstream http://` the origin; GET /health on its admin
#      port, a sample screen fetched twice (a miss, fetched over HTTP from the origin, then a hit);
#   4b. HTTP/2 by prior knowledge on that proxy; a third one on TLS with a pair made here (openssl), its key the
#      unprivileged user's alone: HTTP/2 and HTTP/1.1 by ALPN, and an unreadable key refused by --check-config;
#   5. SIGTERM to all, which must drain and exit with status 0.
#
# The image runs the proxy as a user without privileges, so every step runs it as one: as root, through
# `setpriv` as uid and gid 65534 with no groups and no capabilities (and the run checks /proc that it is so);
# otherwise as the caller. A socket option that needs a capability then fails here as it does in the container,
# on the accepted connection and on the one to the backend.
#
# Every step has a time limit. Environment: BUILD_TIMEOUT (seconds, default 2400), SKIP_BUILD=1 to reuse an
# existing release build, PROXY_BINARY=<path> to check a binary built elsewhere, SWIFT (default: swift).
set -euo pipefail

BUILD_TIMEOUT="${BUILD_TIMEOUT:-2400}"
SWIFT="${SWIFT:-swift}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Keep in step with the RUN swift build line in Docker/Dockerfile.
BUILD_FLAGS=(-c release --static-swift-stdlib)

log() { printf 'check-release-build: %s\n' "$*" >&2; }
fail() {
    log "FAILED: $*"
    if [[ -n "${ORIGIN_LOG:-}" && -s "${ORIGIN_LOG}" ]]; then
        log "origin output (last 20 lines):"
        tail -n 20 "${ORIGIN_LOG}" >&2 || true
    fi
    if [[ -n "${PROXY_LOG:-}" && -s "${PROXY_LOG}" ]]; then
        log "proxy output (last 40 lines):"
        tail -n 40 "${PROXY_LOG}" >&2 || true
    fi
    exit 1
}

for tool in curl timeout "${SWIFT}"; do
    command -v "${tool}" >/dev/null 2>&1 || fail "${tool} is not installed"
done

# How the proxy is run: as root, dropped to nobody without capabilities, as the image's USER does.
UNPRIVILEGED_ID=65534
if [[ "$(id -u)" == "0" ]]; then
    command -v setpriv >/dev/null 2>&1 || fail "setpriv (util-linux) is needed to run the proxy unprivileged as root"
    RUN_AS=(setpriv "--reuid=${UNPRIVILEGED_ID}" "--regid=${UNPRIVILEGED_ID}" --clear-groups --inh-caps=-all
        --bounding-set=-all --no-new-privs --)
else
    RUN_AS=()
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sdui-release-check.XXXXXX")"
# Every proxy started and not yet reaped, so that a failure at any point leaves none running.
STARTED_PIDS=()
# Takes a reaped pid off the list: the number may belong to another process by now.
forget() {
    local kept=() pid
    for pid in ${STARTED_PIDS[@]+"${STARTED_PIDS[@]}"}; do [[ "${pid}" == "${1}" ]] || kept+=("${pid}"); done
    STARTED_PIDS=(${kept[@]+"${kept[@]}"})
}
PROXY_LOG="${WORK}/proxy.log"
ORIGIN_LOG="${WORK}/origin.log"
stop_now() {
    if [[ -n "${1}" ]] && kill -0 "${1}" 2>/dev/null; then
        kill -KILL "${1}" 2>/dev/null || true
        wait "${1}" 2>/dev/null || true
    fi
}
cleanup() {
    for pid in ${STARTED_PIDS[@]+"${STARTED_PIDS[@]}"}; do stop_now "${pid}"; done
    rm -rf "${WORK}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. Build -------------------------------------------------------------------------------------------------
cd "${ROOT}"
if [[ -n "${PROXY_BINARY:-}" ]]; then
    BINARY="${PROXY_BINARY}"
elif [[ "${SKIP_BUILD:-0}" != "1" ]]; then
    log "swift build ${BUILD_FLAGS[*]} (limit ${BUILD_TIMEOUT}s)"
    started=${SECONDS}
    timeout --kill-after=30 "${BUILD_TIMEOUT}" "${SWIFT}" build "${BUILD_FLAGS[@]}" \
        || fail "the release build failed or took longer than ${BUILD_TIMEOUT}s"
    log "built in $((SECONDS - started))s"
fi
if [[ -z "${PROXY_BINARY:-}" ]]; then
    BIN_DIR="$(timeout 300 "${SWIFT}" build "${BUILD_FLAGS[@]}" --show-bin-path)" \
        || fail "swift build --show-bin-path failed"
    BINARY="${BIN_DIR}/sdui-proxy"
fi
[[ -x "${BINARY}" ]] || fail "no binary at ${BINARY}"
if command -v ldd >/dev/null 2>&1; then
    libraries="$(ldd "${BINARY}")" || fail "ldd cannot read ${BINARY}"
    if grep -Eq 'libswift|libFoundation|libdispatch' <<<"${libraries}"; then
        fail "${BINARY} links the Swift runtime dynamically; --static-swift-stdlib did not take effect"
    fi
    if grep -q 'not found' <<<"${libraries}"; then
        fail "${BINARY} needs shared libraries this machine lacks: $(grep 'not found' <<<"${libraries}" | tr -s ' \t\n' ' ')"
    fi
    # The image's run stage installs what the binary loads beyond the base image (zlib1g for libz, libbrotli1 for
    # brotli's three libraries): a library outside this list must be added to Docker/Dockerfile, and here.
    expected='^(linux-vdso|ld-linux[-a-z0-9_]*|libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libutil|libz|libbrotlienc|libbrotlidec|libbrotlicommon)\.so'
    unexpected="$(awk '{ print $1 }' <<<"${libraries}" | sed 's|.*/||' | grep -Ev "${expected}" || true)"
    [[ -z "${unexpected}" ]] \
        || fail "${BINARY} loads shared libraries the image does not install: $(tr '\n' ' ' <<<"${unexpected}")"
    grep -q 'libbrotlienc' <<<"${libraries}" || fail "${BINARY} does not load libbrotlienc: is brotli linked?"
    log "shared libraries: $(awk '{ print $1 }' <<<"${libraries}" | sed 's|.*/||' | tr '\n' ' ')"
fi

# --- 2. Lay out the files as in the image ---------------------------------------------------------------------
# Readable by the unprivileged user: the build directory may not be, nor mktemp's directory (mode 0700).
ETC="${WORK}/etc/sdui-proxy"
SHARE="${WORK}/usr/share/sdui-proxy"
mkdir -p "${ETC}" "${SHARE}/config" "${WORK}/usr/local/bin"
cp "${BINARY}" "${WORK}/usr/local/bin/sdui-proxy"
BINARY="${WORK}/usr/local/bin/sdui-proxy"
cp "${ROOT}/config/sdui-proxy.yaml" "${ETC}/sdui-proxy.yaml"
cp -R "${ROOT}/config/samples" "${SHARE}/config/"
ln -s "${ETC}/sdui-proxy.yaml" "${SHARE}/config/sdui-proxy.yaml"
chmod -R u+rwX,go+rX,go-w "${WORK}"
CONFIG="${ETC}/sdui-proxy.yaml"

# Only what this script sets may configure the proxy: drop SDUI_PROXY_* variables inherited from the caller.
while IFS= read -r name; do
    unset "${name}"
done < <(compgen -e | grep '^SDUI_PROXY_' || true)

# The image's working directory, so `file:config/samples` resolves as it does in the container.
cd "${SHARE}"

# --- 3. --check-config ----------------------------------------------------------------------------------------
if ! output="$(timeout 30 ${RUN_AS[@]+"${RUN_AS[@]}"} "${BINARY}" --check-config --config "${CONFIG}" 2>&1)"; then
    fail "--check-config rejected the bundled config: ${output}"
fi
log "check-config: ${output}"

# docker-compose.yml mounts a volume at /var/lib/sdui-proxy for the write queue: the configuration in force there
# (the bundled file and the compose file's environment) must have a queue, stored in that volume.
COMPOSE="${ROOT}/Docker/docker-compose.yml"
if grep -Eq '^ *- *[a-z-]+:/var/lib/sdui-proxy' "${COMPOSE}"; then
    compose_environment=()
    # The proxy service's SDUI_PROXY_* entries (not commented out), with ${VAR:?...} given a value.
    while IFS= read -r entry; do
        compose_environment+=("${entry}")
    done < <(sed -n '/^  proxy:/,/^  [a-z]/p' "${COMPOSE}" \
        | sed -n 's/^ *\(SDUI_PROXY_[A-Z_]*\): *\(.*\)$/\1=\2/p' \
        | sed -e 's/\${[A-Z_]*:?[^}]*}/compose-check-token/' -e 's/^\([A-Z_]*\)="\(.*\)"$/\1=\2/')
    [[ "${#compose_environment[@]}" -gt 0 ]] || fail "no SDUI_PROXY_* environment found for the proxy in ${COMPOSE}"
    if ! printed="$(env "${compose_environment[@]}" timeout 30 "${BINARY}" --print-config --config "${CONFIG}" 2>&1)"; then
        fail "the configuration docker-compose.yml gives its proxy does not load: ${printed}"
    fi
    grep -q '^queue:' <<<"${printed}" \
        || fail "docker-compose.yml mounts a volume for the write queue, but its proxy's configuration has no queue"
    grep -Eq '^  store: "?/var/lib/sdui-proxy/' <<<"${printed}" \
        || fail "the write queue of docker-compose.yml's proxy is not stored in the volume at /var/lib/sdui-proxy"
    log "docker-compose.yml: the proxy's queue is stored in the volume it mounts"
fi

# --- 4. Run it --------------------------------------------------------------------------------------------------
# A loopback port that is free now. Another process may take it before the proxy binds, so start-up is retried
# with new ports when the bind fails.
free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
        return
    fi
    local port
    for _ in $(seq 1 50); do
        port=$((20000 + RANDOM % 20000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then
            echo "${port}"
            return 0
        fi
    done
    return 1
}

# Starts a proxy in the background, unprivileged, on two free ports: sets LAUNCHED_PID, LAUNCHED_PORT and
# LAUNCHED_ADMIN_PORT. Arguments: the log file, then extra arguments for the proxy.
launch() {
    local output="${1}"
    shift
    LAUNCHED_PORT="$(free_port)" || fail "no free port found"
    LAUNCHED_ADMIN_PORT="$(free_port)" || fail "no free port found"
    while [[ "${LAUNCHED_ADMIN_PORT}" == "${LAUNCHED_PORT}" ]]; do
        LAUNCHED_ADMIN_PORT="$(free_port)" || fail "no free port found"
    done
    # The image listens on 0.0.0.0; here the public listener stays on loopback.
    SDUI_PROXY_LISTEN_HOST=127.0.0.1 ${RUN_AS[@]+"${RUN_AS[@]}"} "${BINARY}" --config "${CONFIG}" \
        --port "${LAUNCHED_PORT}" --admin-port "${LAUNCHED_ADMIN_PORT}" "$@" >"${output}" 2>&1 &
    LAUNCHED_PID=$!
    STARTED_PIDS+=("${LAUNCHED_PID}")
}

# Starts a proxy and waits for GET /health: retried with new ports when another process took one meanwhile.
# Arguments: a name for the log, the log file, then extra arguments for the proxy.
start_healthy() {
    local name="${1}" output="${2}" attempts=1 health=""
    shift 2
    launch "${output}" "$@"
    for _ in $(seq 1 150); do
        if ! kill -0 "${LAUNCHED_PID}" 2>/dev/null; then
            if ((attempts < 3)) && grep -q 'cannot listen' "${output}"; then
                wait "${LAUNCHED_PID}" 2>/dev/null || true
                forget "${LAUNCHED_PID}"
                log "${name}: a port was taken meanwhile; retrying with new ports"
                attempts=$((attempts + 1))
                launch "${output}" "$@"
                continue
            fi
            fail "the ${name} exited during start-up"
        fi
        if health="$(curl -fsS --max-time 2 "http://127.0.0.1:${LAUNCHED_ADMIN_PORT}/health" 2>/dev/null)"; then
            [[ "${health}" == *'"ok"'* ]] || fail "unexpected /health body from the ${name}: ${health}"
            log "${name}: sdui-proxy (pid ${LAUNCHED_PID}) on 127.0.0.1:${LAUNCHED_PORT}, admin" \
                "127.0.0.1:${LAUNCHED_ADMIN_PORT}, health ${health}"
            return 0
        fi
        sleep 0.2
    done
    fail "GET /health on the ${name} did not succeed within 30s"
}

# The process runs as the unprivileged user, without capabilities (when /proc says).
check_unprivileged() {
    local status="/proc/${1}/status"
    [[ -r "${status}" ]] || return 0
    local uid capabilities
    uid="$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "${status}")"
    capabilities="$(awk '/^Cap(Prm|Eff|Amb):/ { printf "%s", $2 }' "${status}")"
    if [[ "$(id -u)" == "0" ]]; then
        [[ "${uid}" == "${UNPRIVILEGED_ID} ${UNPRIVILEGED_ID} ${UNPRIVILEGED_ID} ${UNPRIVILEGED_ID}" ]] \
            || fail "the ${2} runs as uid ${uid}, not ${UNPRIVILEGED_ID}"
    fi
    [[ "${capabilities}" =~ ^0+$ ]] || fail "the ${2} holds capabilities (${capabilities})"
    log "${2}: uid ${uid%% *}, no capabilities"
}

# The origin: the samples from its files, over HTTP.
start_healthy origin "${ORIGIN_LOG}" --upstream file:config/samples
ORIGIN_PID="${LAUNCHED_PID}"
ORIGIN_PORT="${LAUNCHED_PORT}"
check_unprivileged "${ORIGIN_PID}" origin
# The proxy under test, in front of it: its warm-up and its misses go over TCP.
start_healthy proxy "${PROXY_LOG}" --upstream "http://127.0.0.1:${ORIGIN_PORT}"
PROXY_PID="${LAUNCHED_PID}"
PORT="${LAUNCHED_PORT}"
check_unprivileged "${PROXY_PID}" proxy
# The image's HEALTHCHECK: the binary's own health command, on the same config, unprivileged.
ADMIN_PORT="${LAUNCHED_ADMIN_PORT}"
health_output="$(timeout 10 ${RUN_AS[@]+"${RUN_AS[@]}"} "${BINARY}" health --config "${CONFIG}" \
    --admin-port "${ADMIN_PORT}" 2>&1)" || fail "sdui-proxy health failed on a healthy proxy: ${health_output}"
log "sdui-proxy health: exit 0"

# Not among the screens the warm-up fetches: the first GET is a miss, fetched from the origin then.
SCREEN=/screens/products/1
fetch() {
    curl -sS --max-time 10 -o "${WORK}/body" -D "${WORK}/headers" -w '%{http_code}' "http://127.0.0.1:${PORT}${SCREEN}"
}
status="$(fetch)" || fail "GET ${SCREEN} failed"
[[ "${status}" == "200" ]] || fail "GET ${SCREEN} answered ${status}: $(head -c 300 "${WORK}/body")"
grep -q '_beagleComponent_' "${WORK}/body" || fail "GET ${SCREEN} did not return a component"
grep -qi '^x-cache: MISS' "${WORK}/headers" \
    || fail "the first GET ${SCREEN} was not a miss: $(tr -d '\r' <"${WORK}/headers")"
status="$(fetch)" || fail "the second GET ${SCREEN} failed"
[[ "${status}" == "200" ]] || fail "the second GET ${SCREEN} answered ${status}"
grep -qi '^x-cache: HIT' "${WORK}/headers" \
    || fail "the second GET ${SCREEN} was not a cache hit: $(tr -d '\r' <"${WORK}/headers")"
log "GET ${SCREEN}: 200, $(wc -c <"${WORK}/body") bytes, fetched from the origin, then answered from the cache"

# --- 4b. TLS and HTTP/2 -------------------------------------------------------------------------------------------
# HTTP/2 by prior knowledge on the clear-text proxy; then a third proxy on TLS with a pair made here, its key
# readable by the unprivileged user alone (as docker-compose.tls.yml gives it to the image's user): HTTP/2 and
# HTTP/1.1 by ALPN. A key that user cannot read is refused by --check-config, naming the key.
status="$(curl -sS --max-time 10 --http2-prior-knowledge -o /dev/null -w '%{http_version} %{http_code}' \
    "http://127.0.0.1:${PORT}${SCREEN}")" || fail "GET ${SCREEN} over h2c failed"
[[ "${status}" == "2 200" ]] || fail "GET ${SCREEN} over h2c answered ${status}"
log "GET ${SCREEN} over HTTP/2 with prior knowledge: ${status}"
if command -v openssl >/dev/null 2>&1; then
    TLS_DIR="${WORK}/tls"
    mkdir -p "${TLS_DIR}"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "${TLS_DIR}/key.pem" -out "${TLS_DIR}/cert.pem" \
        2>/dev/null || fail "openssl could not make a test certificate"
    chmod 0400 "${TLS_DIR}/key.pem"
    chmod 0755 "${TLS_DIR}"
    chmod 0444 "${TLS_DIR}/cert.pem"
    export SDUI_PROXY_LISTEN_TLS_CERTIFICATE="${TLS_DIR}/cert.pem" SDUI_PROXY_LISTEN_TLS_PRIVATE_KEY="${TLS_DIR}/key.pem"
    if [[ "$(id -u)" == "0" ]]; then
        # Root's key, mode 0400: the unprivileged proxy cannot read it, and says so before binding anything.
        if refused="$(timeout 30 "${RUN_AS[@]}" "${BINARY}" --check-config --config "${CONFIG}" 2>&1)"; then
            fail "--check-config accepted a key the proxy's user cannot read"
        fi
        [[ "${refused}" == *listen.tls.privateKey*"cannot read"* ]] \
            || fail "--check-config refused an unreadable key without naming it: ${refused}"
        log "check-config: an unreadable key is refused: ${refused}"
        chown "${UNPRIVILEGED_ID}:${UNPRIVILEGED_ID}" "${TLS_DIR}/key.pem" "${TLS_DIR}/cert.pem"
    fi
    TLS_LOG="${WORK}/tls-proxy.log"
    start_healthy "TLS proxy" "${TLS_LOG}" --upstream "http://127.0.0.1:${ORIGIN_PORT}"
    TLS_PID="${LAUNCHED_PID}"
    unset SDUI_PROXY_LISTEN_TLS_CERTIFICATE SDUI_PROXY_LISTEN_TLS_PRIVATE_KEY
    check_unprivileged "${TLS_PID}" "TLS proxy"
    for version in --http2 --http1.1; do
        status="$(curl -sS --max-time 10 --cacert "${TLS_DIR}/cert.pem" "${version}" -o /dev/null \
            -w '%{http_version} %{http_code}' "https://localhost:${LAUNCHED_PORT}${SCREEN}")" \
            || fail "GET ${SCREEN} over TLS (${version}) failed"
        [[ "${status}" == *" 200" ]] || fail "GET ${SCREEN} over TLS (${version}) answered ${status}"
        log "GET ${SCREEN} over TLS, curl ${version}: HTTP/${status}"
    done
    kill -TERM "${TLS_PID}"
else
    log "openssl is not installed: the TLS listener is not checked"
fi

# --- 5. SIGTERM -------------------------------------------------------------------------------------------------
# Waits for a proxy sent SIGTERM to exit 0. Arguments: its pid, a name for the log.
stopped() {
    local code
    for _ in $(seq 1 100); do
        kill -0 "${1}" 2>/dev/null || break
        sleep 0.2
    done
    kill -0 "${1}" 2>/dev/null && fail "the ${2} was still running 20s after SIGTERM"
    set +e
    wait "${1}"
    code=$?
    set -e
    forget "${1}"
    [[ "${code}" == "0" ]] || fail "the ${2} exited with status ${code} after SIGTERM (expected 0)"
    log "SIGTERM: the ${2} exited with status 0"
}
if [[ -n "${TLS_PID:-}" ]]; then stopped "${TLS_PID}" "TLS proxy"; fi
kill -TERM "${PROXY_PID}"
stopped "${PROXY_PID}" proxy
kill -TERM "${ORIGIN_PID}"
stopped "${ORIGIN_PID}" origin
log "OK"
