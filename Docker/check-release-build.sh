#!/usr/bin/env bash
# Builds the release binary the way Docker/Dockerfile does and runs it laid out like the image, for machines
# (and CI) without a Docker engine:
#
#   1. `swift build -c release --static-swift-stdlib` (the Dockerfile's command, same flags);
#   2. the bundled config copied to <tmp>/etc/sdui-proxy/sdui-proxy.yaml and the samples to
#      <tmp>/usr/share/sdui-proxy/config/samples, the working directory set to <tmp>/usr/share/sdui-proxy;
#   3. `sdui-proxy --check-config --config <tmp>/etc/sdui-proxy/sdui-proxy.yaml`;
#   4. the proxy started on that config with free loopback ports, GET /health on the admin port, a sample screen
#      fetched twice (the second from the cache);
#   5. SIGTERM to the proxy, which must drain and exit with status 0.
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
    if [[ -n "${PROXY_LOG:-}" && -s "${PROXY_LOG}" ]]; then
        log "proxy output (last 40 lines):"
        tail -n 40 "${PROXY_LOG}" >&2 || true
    fi
    exit 1
}

for tool in curl timeout "${SWIFT}"; do
    command -v "${tool}" >/dev/null 2>&1 || fail "${tool} is not installed"
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sdui-release-check.XXXXXX")"
PROXY_PID=""
PROXY_LOG="${WORK}/proxy.log"
cleanup() {
    if [[ -n "${PROXY_PID}" ]] && kill -0 "${PROXY_PID}" 2>/dev/null; then
        kill -KILL "${PROXY_PID}" 2>/dev/null || true
        wait "${PROXY_PID}" 2>/dev/null || true
    fi
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
if command -v ldd >/dev/null 2>&1 && ldd "${BINARY}" | grep -Eq 'libswift|libFoundation|libdispatch'; then
    fail "${BINARY} links the Swift runtime dynamically; --static-swift-stdlib did not take effect"
fi

# --- 2. Lay out the files as in the image ---------------------------------------------------------------------
ETC="${WORK}/etc/sdui-proxy"
SHARE="${WORK}/usr/share/sdui-proxy"
mkdir -p "${ETC}" "${SHARE}/config"
cp "${ROOT}/config/sdui-proxy.yaml" "${ETC}/sdui-proxy.yaml"
cp -R "${ROOT}/config/samples" "${SHARE}/config/"
ln -s "${ETC}/sdui-proxy.yaml" "${SHARE}/config/sdui-proxy.yaml"
CONFIG="${ETC}/sdui-proxy.yaml"

# Only what this script sets may configure the proxy: drop SDUI_PROXY_* variables inherited from the caller.
while IFS= read -r name; do
    unset "${name}"
done < <(compgen -e | grep '^SDUI_PROXY_' || true)

# The image's working directory, so `file:config/samples` resolves as it does in the container.
cd "${SHARE}"

# --- 3. --check-config ----------------------------------------------------------------------------------------
if ! output="$(timeout 30 "${BINARY}" --check-config --config "${CONFIG}" 2>&1)"; then
    fail "--check-config rejected the bundled config: ${output}"
fi
log "check-config: ${output}"

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

start_proxy() {
    PORT="$(free_port)" || fail "no free port found"
    ADMIN_PORT="$(free_port)" || fail "no free port found"
    while [[ "${ADMIN_PORT}" == "${PORT}" ]]; do ADMIN_PORT="$(free_port)" || fail "no free port found"; done
    # The image listens on 0.0.0.0; here the public listener stays on loopback.
    SDUI_PROXY_LISTEN_HOST=127.0.0.1 "${BINARY}" --config "${CONFIG}" --port "${PORT}" --admin-port "${ADMIN_PORT}" \
        >"${PROXY_LOG}" 2>&1 &
    PROXY_PID=$!
    log "started sdui-proxy (pid ${PROXY_PID}) on 127.0.0.1:${PORT}, admin 127.0.0.1:${ADMIN_PORT}"
}

start_proxy
attempts=1
healthy=0
for _ in $(seq 1 150); do
    if ! kill -0 "${PROXY_PID}" 2>/dev/null; then
        if ((attempts < 3)) && grep -q 'cannot listen' "${PROXY_LOG}"; then
            wait "${PROXY_PID}" 2>/dev/null || true
            log "a port was taken meanwhile; retrying with new ports"
            attempts=$((attempts + 1))
            start_proxy
            continue
        fi
        fail "the proxy exited during start-up"
    fi
    if health="$(curl -fsS --max-time 2 "http://127.0.0.1:${ADMIN_PORT}/health" 2>/dev/null)"; then
        healthy=1
        break
    fi
    sleep 0.2
done
[[ "${healthy}" == "1" ]] || fail "GET /health did not succeed within 30s"
[[ "${health}" == *'"ok"'* ]] || fail "unexpected /health body: ${health}"
log "health: ${health}"

fetch() {
    curl -sS --max-time 10 -o "${WORK}/body" -D "${WORK}/headers" -w '%{http_code}' \
        "http://127.0.0.1:${PORT}/screens/home"
}
status="$(fetch)" || fail "GET /screens/home failed"
[[ "${status}" == "200" ]] || fail "GET /screens/home answered ${status}: $(head -c 300 "${WORK}/body")"
grep -q '_beagleComponent_' "${WORK}/body" || fail "GET /screens/home did not return a component"
status="$(fetch)" || fail "the second GET /screens/home failed"
[[ "${status}" == "200" ]] || fail "the second GET /screens/home answered ${status}"
grep -qi '^x-cache: HIT' "${WORK}/headers" || fail "the second GET /screens/home was not a cache hit: $(tr -d '\r' <"${WORK}/headers")"
log "GET /screens/home: 200, $(wc -c <"${WORK}/body") bytes, second answer from the cache"

# --- 5. SIGTERM -------------------------------------------------------------------------------------------------
kill -TERM "${PROXY_PID}"
for _ in $(seq 1 100); do
    kill -0 "${PROXY_PID}" 2>/dev/null || break
    sleep 0.2
done
if kill -0 "${PROXY_PID}" 2>/dev/null; then
    fail "the proxy was still running 20s after SIGTERM"
fi
set +e
wait "${PROXY_PID}"
code=$?
set -e
PROXY_PID=""
[[ "${code}" == "0" ]] || fail "the proxy exited with status ${code} after SIGTERM (expected 0)"
log "SIGTERM: exited with status 0"
log "OK"
