#!/usr/bin/env python3
"""Runs the fleet of Docker/docker-compose.fleet.yml without a Docker engine, and checks it does what the compose
file promises.

The same files the compose file mounts, with the compose network's host names and ports replaced by free ports on
127.0.0.1: PostgreSQL (from the installed packages), the sample backend (nginx with backend-nginx.conf, serving
config/samples), three replicas on sdui-proxy-fleet.yaml with the compose file's environment, and the balancer
(nginx with balancer-nginx.conf). Then:

  1. the compose file's warm-up, through the balancer's admin port with "fleet": true, is taken by all three;
  2. each replica then answers /screens/home from its cache, and so does the balancer;
  3. a prefix purge through the balancer reaches every replica;
  4. with the backend down, a write through the balancer is accepted (202) into the shared queue, its Location (the
     public /.sdui/queue/ID) and every replica's admin /queue/ID report it pending, and once the backend is back it
     is delivered, as every replica reports on both listeners;
  5. SIGTERM: every replica drains and exits with status 0.

Before that it checks what only a Docker engine would otherwise show: the replicas trust the compose network's range
for the balancer's X-Forwarded-For (listen.trustedProxies against the network's subnet), and the image declares no
VOLUME that would give each replica an anonymous volume it never uses. Run, the client's address reaches the backend
through the balancer and a replica (the backend logs X-Forwarded-For; the compose network's range is loopback here).

Everything runs as `nobody` when the caller is root, and everything it started is stopped by PID at the end.

    BIN=.build/release/sdui-proxy Docker/check-fleet.py      # the debug build by default
"""
import http.client
import json
import os
import re
import shutil
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from local_services import (  # noqa: E402
    Services, as_unprivileged, free_port, listening, run_in_work_directory, wait_for)

BIN = os.environ.get("BIN") or next(
    (path for path in (f"{ROOT}/.build/release/sdui-proxy", f"{ROOT}/.build/debug/sdui-proxy") if os.path.exists(path)),
    None)
TOKEN = "check-fleet-token-0123456789abcdef"
PASSWORD = "check-fleet-password"
services = Services()


def log(message):
    print(f"check-fleet: {message}", file=sys.stderr, flush=True)


# The replicas' logs and processes, so that a failure shows what each replica said and whether it is still running.
replica_logs = []


def fail(message):
    for name, path, process in replica_logs:
        status = process.poll()
        state = "running" if status is None else f"exited with status {status}"
        try:
            with open(path) as f:
                tail = f.readlines()[-20:]
        except OSError as error:
            tail = [f"(no log: {error})\n"]
        log(f"{name} ({state}), the end of its log:")
        sys.stderr.write("".join("    " + line for line in tail))
    sys.exit(f"check-fleet: FAILED: {message}")


def request(port, method, path, body=None, admin=False):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": f"Bearer {TOKEN}"} if admin else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    return response.status, response, text


def until(what, check, limit=15):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    fail(f"{what}: not within {limit}s")


def main():
    if not BIN:
        sys.exit("no sdui-proxy binary: swift build, or set BIN")
    run_in_work_directory("sdui-check-fleet.", services, run)


def start_backend(work, samples, port, name):
    with open(os.path.join(ROOT, "Docker/backend-nginx.conf")) as f:
        config = f.read().replace("listen 8081;", f"listen 127.0.0.1:{port};")
    config = config.replace("root /usr/share/nginx/html;", f"root {samples};")
    # Each request's X-Forwarded-For, one per line: what the backend learns of the client.
    config = "log_format forwarded_for '$request_uri $http_x_forwarded_for';\n" + config.replace(
        "server_name _;", f"server_name _;\n    access_log {backend_access_log(work, name)} forwarded_for;")
    return services.nginx(work, name, config, port)


def backend_access_log(work, name):
    return os.path.join(work, name, "access.log")


def check_compose_files():
    """What the compose files promise that no process here can show: the trusted range is the network's, the
    balancer sets X-Forwarded-For, and the image gives the replicas no volume."""
    with open(os.path.join(ROOT, "Docker/docker-compose.fleet.yml")) as f:
        compose = f.read()
    with open(os.path.join(ROOT, "Docker/sdui-proxy-fleet.yaml")) as f:
        fleet_config = f.read()
    with open(os.path.join(ROOT, "Docker/balancer-nginx.conf")) as f:
        balancer = f.read()
    with open(os.path.join(ROOT, "Docker/Dockerfile")) as f:
        dockerfile = f.read()
    subnets = re.findall(r"^\s*-\s*subnet:\s*(\S+)", compose, re.MULTILINE)
    trusted = re.search(r"trustedProxies:\s*\[([^\]]*)\]", fleet_config)
    trusted = [entry.strip() for entry in trusted.group(1).split(",")] if trusted else []
    if not subnets or any(subnet not in trusted for subnet in subnets):
        fail(f"listen.trustedProxies {trusted} in sdui-proxy-fleet.yaml is not the compose network's range {subnets}")
    if not re.search(r"^\s*proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;", balancer, re.MULTILINE):
        fail("the balancer does not set X-Forwarded-For: the replicas would see every client as the balancer")
    if re.search(r"^VOLUME\b", dockerfile, re.MULTILINE):
        fail("the image declares a VOLUME: every replica of the fleet would get an anonymous volume it never uses")
    log(f"the replicas trust the compose network {subnets} for the balancer's X-Forwarded-For; the image has no VOLUME")


def run(work):
    check_compose_files()
    # The binary and the samples where `nobody` can read them.
    binary = os.path.join(work, "sdui-proxy")
    shutil.copy(BIN, binary)
    samples = os.path.join(work, "samples")
    shutil.copytree(os.path.join(ROOT, "config/samples"), samples)
    config = os.path.join(work, "sdui-proxy-fleet.yaml")
    shutil.copy(os.path.join(ROOT, "Docker/sdui-proxy-fleet.yaml"), config)
    for directory, _, files in os.walk(work):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o755)

    pg_port = services.postgres(work)
    database = f"postgres://sdui:{PASSWORD}@127.0.0.1:{pg_port}/postgres"
    backend_port = free_port()
    backend = start_backend(work, samples, backend_port, "backend")

    replicas = []
    for number in (1, 2, 3):
        name = f"proxy-{number}"
        public, admin = free_port(), free_port()
        environment = dict(os.environ)
        environment.update({
            # As the compose file sets them.
            "SDUI_PROXY_ADMIN_TOKEN": TOKEN,
            "SDUI_PROXY_CLUSTER_POSTGRES": database,
            "SDUI_PROXY_QUEUE_STORE": database,
            "SDUI_PROXY_CLUSTER_REPLICA_NAME": name,
            # What the compose network gives by name and port.
            "SDUI_PROXY_UPSTREAM_URL": f"http://127.0.0.1:{backend_port}",
            "SDUI_PROXY_LISTEN_HOST": "127.0.0.1",
            "SDUI_PROXY_LISTEN_PORT": str(public),
            "SDUI_PROXY_ADMIN_HOST": "127.0.0.1",
            "SDUI_PROXY_ADMIN_PORT": str(admin),
            # The compose network's range, where the balancer is: loopback here.
            "SDUI_PROXY_LISTEN_TRUSTED_PROXIES": "[127.0.0.0/8]",
        })
        log_path = os.path.join(work, f"{name}.log")
        process = services.start(as_unprivileged() + [binary, "--config", config], env=environment, cwd=work,
                                 stderr=open(log_path, "w"))
        replicas.append((name, public, admin, process))
        replica_logs.append((name, log_path, process))
    for name, _, admin, process in replicas:
        def connected(name=name, admin=admin, process=process):
            # A replica that exited will not connect: say so at once, not after the limit.
            if process.poll() is not None:
                fail(f"{name} exited with status {process.returncode} before it connected to the fleet's log")
            return safe(lambda: '"connected":true' in request(admin, "GET", "/cluster", admin=True)[2])
        until(f"{name} connected to the fleet's log", connected, limit=30)
    log("PostgreSQL, the backend and three replicas are up")

    with open(os.path.join(ROOT, "Docker/balancer-nginx.conf")) as f:
        balancer = f.read()
    lb_public, lb_admin = free_port(), free_port()
    for number, (_, public, admin, _) in enumerate(replicas, start=1):
        balancer = balancer.replace(f"proxy-{number}:8080", f"127.0.0.1:{public}")
        balancer = balancer.replace(f"proxy-{number}:9090", f"127.0.0.1:{admin}")
    balancer = balancer.replace("listen 8080;", f"listen 127.0.0.1:{lb_public};")
    balancer = balancer.replace("listen 9090;", f"listen 127.0.0.1:{lb_admin};")
    services.nginx(work, "balancer", balancer, lb_public)
    wait_for("the balancer's admin port", listening(lb_admin))

    # 1. The compose file's warm-up.
    status, _, text = request(lb_admin, "POST", "/prefetch", json.dumps({"urls": ["/screens/home"], "fleet": True}),
                              admin=True)
    answer = json.loads(text) if status == 200 else {}
    if answer.get("fleet", {}).get("took") != 3 or answer.get("fleet", {}).get("replicas") != 3:
        fail(f"the fleet warm-up through the balancer answered {status} {text}")
    log(f"warm-up through the balancer: {answer['fleet']}")

    # 2. Every replica is warm, and so is the balancer's view.
    for name, public, _, _ in replicas:
        until(f"{name} serving the warmed screen from its cache",
              lambda public=public: request(public, "GET", "/screens/home")[1].getheader("X-Cache") == "HIT")
    if request(lb_public, "GET", "/screens/home")[1].getheader("X-Cache") != "HIT":
        fail("the balancer's answer for a warmed screen was not a hit")
    log("every replica, and the balancer, answer /screens/home from the cache")

    # 3. A purge through the balancer reaches every replica.
    status, _, text = request(lb_admin, "DELETE", "/cache?prefix=/screens", admin=True)
    if status != 200 or '"fanOut":"recorded"' not in text:
        fail(f"the purge through the balancer answered {status} {text}")
    for name, public, _, _ in replicas:
        until(f"{name} missing the purged screen",
              lambda public=public: request(public, "GET", "/screens/home")[1].getheader("X-Cache") == "MISS")
    log("a purge through the balancer reached every replica")

    # The client's address reaches the backend: the balancer's X-Forwarded-For, kept by the replica that trusts it,
    # with the balancer's hop appended. A replica that did not trust it would send the balancer's address alone.
    screen = "/screens/products/3"
    status, response, text = request(lb_public, "GET", screen)
    if status != 200 or response.getheader("X-Cache") != "MISS":
        fail(f"a first GET {screen} through the balancer answered {status} {response.getheader('X-Cache')}")
    def forwarded_for():
        with open(backend_access_log(work, "backend")) as f:
            return [line.split(" ", 1)[1].strip() for line in f if line.startswith(screen + " ")]
    # nginx writes its log line once the answer has gone: it may come a moment after the replica has it.
    until(f"the backend's log line for {screen}", lambda: len(forwarded_for()) > 0)
    if forwarded_for() != ["127.0.0.1, 127.0.0.1"]:
        fail(f"the backend saw X-Forwarded-For {forwarded_for()} for {screen} (expected the client, then the balancer)")
    log(f"the backend saw the client's address through the balancer and a replica: {forwarded_for()[0]}")

    # 4. A write while the backend is down: accepted into the shared queue, delivered once it is back.
    backend.send_signal(signal.SIGINT)
    backend.wait(timeout=30)
    status, response, text = request(lb_public, "POST", "/api/orders", '{"order":1}')
    if status != 202:
        fail(f"a write with the backend down answered {status} {text}")
    # Location is the client's own, read-only view of the write on the public listener (through the balancer, so on
    # whichever replica it reaches); the admin listener of every replica has the operator's view at /queue/ID.
    location = response.getheader("Location") or ""
    if not location.startswith("/.sdui/queue/"):
        fail(f"a queued write's Location is {location!r}, not its public status /.sdui/queue/ID")
    admin_status = "/queue/" + location.rsplit("/", 1)[1]
    status, _, text = request(lb_public, "GET", location)
    if '"state":"pending"' not in text and '"state":"delivered"' not in text:
        fail(f"the balancer reported {location} as {status} {text}")
    for name, public, admin, _ in replicas:
        for port, path, is_admin in ((public, location, False), (admin, admin_status, True)):
            status, _, text = request(port, "GET", path, admin=is_admin)
            if '"state":"pending"' not in text and '"state":"delivered"' not in text:
                fail(f"{name} reported {path} as {status} {text}")
    start_backend(work, samples, backend_port, "backend-again")
    for name, public, admin, _ in replicas:
        until(f"{name} reporting {admin_status} delivered",
              lambda admin=admin: '"state":"delivered"' in request(admin, "GET", admin_status, admin=True)[2],
              limit=30)
        until(f"{name} reporting {location} delivered to its client",
              lambda public=public: '"state":"delivered"' in request(public, "GET", location)[2], limit=30)
    log(f"a write through the balancer with the backend down was queued and delivered ({location})")

    # 5. Graceful stop.
    for name, _, _, process in replicas:
        process.send_signal(signal.SIGTERM)
    for name, _, _, process in replicas:
        try:
            code = process.wait(timeout=30)
        except Exception:
            fail(f"{name} did not stop within 30 s of SIGTERM")
        if code != 0:
            fail(f"{name} exited with status {code}")
    log("every replica drained and exited with status 0")
    print("check-fleet: OK")


def safe(check):
    try:
        return check()
    except OSError:
        return False


if __name__ == "__main__":
    main()
