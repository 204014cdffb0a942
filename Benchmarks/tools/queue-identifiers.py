#!/usr/bin/env python3
"""What checking writes for local identifiers costs a queued write: one replica, SQLite, the backend down (nothing
listens on its port), so every write is tried, refused and queued (202).

Three runs of WRITES writes on a concurrent route (`POST /api/events`), by CLIENTS client threads over kept-alive
connections, each body a small JSON object with a few string values:
  1. no route has `creates` (writes are not looked at);
  2. `POST /api/orders` creates, with PENDING creates queued first (their local identifiers pending), and the
     writes naming none of them;
  3. the same, each write naming one pending identifier (it then depends on that create).
For each: writes accepted per second, the 202's p50 and p99, and the proxy's CPU time per write (user + system, from
/proc, over the run). Everything runs on 127.0.0.1; what it started is stopped by PID at the end.

    BIN=.build/release/sdui-proxy Benchmarks/tools/queue-identifiers.py     # WRITES=3000 PENDING=10000 CLIENTS=16
"""
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from local_services import Services, free_port, listening, run_in_work_directory, wait_for  # noqa: E402

BIN = os.environ.get("BIN", ".build/release/sdui-proxy")
WRITES = int(os.environ.get("WRITES", "3000"))
PENDING = int(os.environ.get("PENDING", "10000"))
CLIENTS = int(os.environ.get("CLIENTS", "16"))
TICKS = os.sysconf("SC_CLK_TCK")
services = Services()


def start_proxy(work, name, creates):
    port, admin, backend = free_port(), free_port(), free_port()
    orders = ""
    if creates:
        orders = """    - match: POST /api/orders
      ordering: sequential
      creates: { localId: { header: X-Local-Id }, remoteId: { json: /id } }
"""
    config = os.path.join(work, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: {{ host: 127.0.0.1, port: {port} }}
admin: {{ host: 127.0.0.1, port: {admin} }}
upstream: {{ url: "http://127.0.0.1:{backend}", timeout: 2s, connectTimeout: 500ms }}
queue:
  store: "{os.path.join(work, name)}"
  maxDepth: 1000000
  routes:
    - {{ match: POST /api/events, ordering: concurrent, retry: {{ maxAttempts: 1000000, backoff: 60s, maxBackoff: 60s }} }}
{orders}log: {{ level: error, access: false }}
""")
    process = services.start([BIN, "--config", config])
    wait_for("the proxy", listening(admin))
    return port, process


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def send(port, count, request):
    """Sends `count` writes from CLIENTS threads, `request(number)` giving (path, headers, body) for each; returns
    (seconds, sorted latencies)."""
    latencies, failures = [], []
    lock = threading.Lock()
    next_write = [0]

    def client():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                number = next_write[0]
                next_write[0] += 1
            if number >= count:
                return
            path, headers, body = request(number)
            started = time.monotonic()
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            took = time.monotonic() - started
            with lock:
                if response.status != 202:
                    failures.append(f"write {number} answered {response.status}: {answer[:200]!r}")
                    return
                latencies.append(took)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit(f"{len(failures)} writes not accepted; the first: {failures[0]}")
    return time.monotonic() - started, sorted(latencies)


def event(naming):
    def request(number):
        order = f"tmp-{number % PENDING}" if naming else f"other-{number}"
        body = json.dumps({"n": number, "order": order, "sku": "A-1", "note": "a write"})
        return "/api/events", {"Content-Type": "application/json"}, body
    return request


def create(number):
    return "/api/orders", {"Content-Type": "application/json", "X-Local-Id": f"tmp-{number}"}, "{}"


def measure(work, name, creates, naming):
    port, process = start_proxy(work, name, creates)
    if creates:
        seconds, _ = send(port, PENDING, create)
        print(f"  ({PENDING} creates queued first, {PENDING / seconds:,.0f}/s)", flush=True)
    before = cpu_seconds(process.pid)
    seconds, latencies = send(port, WRITES, event(naming))
    cpu = cpu_seconds(process.pid) - before
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1000
    print(f"{name}: {WRITES / seconds:,.0f} writes/s, 202 p50 {p50:.2f} ms p99 {p99:.2f} ms, "
          f"CPU {cpu / WRITES * 1e6:,.0f} us/write", flush=True)
    process.terminate()
    process.wait(timeout=30)


def run(work):
    measure(work, "no creates route", False, False)
    measure(work, f"creates, {PENDING} pending, writes naming none", True, False)
    measure(work, f"creates, {PENDING} pending, each write naming one", True, True)


if __name__ == "__main__":
    run_in_work_directory("sdui-queue-identifiers.", services, run)
