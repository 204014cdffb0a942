#!/usr/bin/env python3
"""What the write queue takes and delivers, in one replica with SQLite and in one and three replicas sharing
PostgreSQL.

For each setup: the backend is down (nothing listens on its port), WRITES writes are sent on a concurrent route
(`POST /api/events`) by CLIENTS client threads, spread over the replicas, each over a kept-alive connection; every
one must be accepted (202). Then the backend comes up and the time until the queue is empty is measured. Then the
same, SEQUENTIAL writes on a sequential route (`POST /api/orders`). Prints writes accepted per second with the
202's p50 and p99, and deliveries per second; checks that the backend saw every write's Idempotency-Key, and says
how many it saw twice (order is the tests' to check: `FleetQueueTests`).

PostgreSQL runs with fsync on, as SQLite runs with synchronous=FULL: a 202 means the write is on disk. Everything
runs on 127.0.0.1; everything it started is stopped by PID at the end.

    BIN=.build/release/sdui-proxy Benchmarks/tools/queue-fleet.py     # WRITES=2000 SEQUENTIAL=300 CLIENTS=16
"""
import http.client
import http.server
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from local_services import Services, free_port, listening, run_in_work_directory, wait_for  # noqa: E402

BIN = os.environ.get("BIN", ".build/release/sdui-proxy")
WRITES = int(os.environ.get("WRITES", "2000"))
SEQUENTIAL = int(os.environ.get("SEQUENTIAL", "300"))
CLIENTS = int(os.environ.get("CLIENTS", "16"))
services = Services()


class Backend(http.server.BaseHTTPRequestHandler):
    """Takes every write (201) and records its key, in the order it came."""
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    seen = []
    lock = threading.Lock()
    # Once "down", connections the proxy kept alive are closed without an answer, as a backend that went away.
    up = True

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not Backend.up:
            self.close_connection = True
            return
        with Backend.lock:
            Backend.seen.append((self.path, self.headers.get("Idempotency-Key")))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def start_replicas(work, name, count, store, backend_port):
    replicas = []
    slug = "".join(character if character.isalnum() else "-" for character in name)
    for number in range(count):
        port, admin = free_port(), free_port()
        config = os.path.join(work, f"{name}-{number}.yaml")
        with open(config, "w") as f:
            f.write(f"""listen: {{ host: 127.0.0.1, port: {port} }}
admin: {{ host: 127.0.0.1, port: {admin} }}
upstream: {{ url: "http://127.0.0.1:{backend_port}", timeout: 2s, connectTimeout: 500ms }}
cluster: {{ replicaName: "{slug}-{number}" }}
queue:
  store: "{store(number)}"
  concurrency: 16
  routes:
    - {{ match: POST /api/events, ordering: concurrent, retry: {{ maxAttempts: 1000000, backoff: 100ms, maxBackoff: 500ms }} }}
    - {{ match: POST /api/orders, ordering: sequential, retry: {{ maxAttempts: 1000000, backoff: 100ms, maxBackoff: 500ms }} }}
log: {{ level: error, access: false }}
""")
        process = services.start([BIN, "--config", config])
        wait_for("a replica", listening(admin))
        replicas.append((port, admin, process))
    return replicas


def send_writes(replicas, path, count):
    """Sends `count` writes from CLIENTS threads; returns (seconds, latencies, ids in acceptance order)."""
    latencies, accepted, failures = [], [], []
    lock = threading.Lock()
    next_write = [0]

    def client(index):
        port = replicas[index % len(replicas)][0]
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                number = next_write[0]
                next_write[0] += 1
            if number >= count:
                return
            started = time.monotonic()
            connection.request("POST", path, body=json.dumps({"n": number}),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            body = response.read()
            took = time.monotonic() - started
            if response.status != 202:
                with lock:
                    failures.append(f"write {number} answered {response.status}: {body[:200]!r}")
                return
            with lock:
                latencies.append(took)
                accepted.append(json.loads(body)["id"])

    threads = [threading.Thread(target=client, args=(index,)) for index in range(CLIENTS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit(f"{len(failures)} writes not accepted; the first: {failures[0]}")
    return time.monotonic() - started, sorted(latencies), accepted


def depth(admin):
    connection = http.client.HTTPConnection("127.0.0.1", admin, timeout=10)
    connection.request("GET", "/queue")
    return json.loads(connection.getresponse().read())["depth"]


def measure(work, name, count, store):
    backend_port = free_port()
    Backend.seen = []
    replicas = start_replicas(work, name, count, store, backend_port)
    results = []
    for path, writes in (("/api/events", WRITES), ("/api/orders", SEQUENTIAL)):
        seconds, latencies, accepted = send_writes(replicas, path, writes)
        p50 = latencies[len(latencies) // 2] * 1000
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1000
        Backend.up = True
        backend = http.server.ThreadingHTTPServer(("127.0.0.1", backend_port), Backend)
        threading.Thread(target=backend.serve_forever, daemon=True).start()
        started = time.monotonic()
        deadline = started + 300
        while depth(replicas[0][1]) > 0:
            if time.monotonic() > deadline:
                sys.exit(f"{name}: the queue was not empty 300 s after the backend came back")
            time.sleep(0.01)
        delivered = time.monotonic() - started
        Backend.up = False
        backend.shutdown()
        backend.server_close()
        keys = [key for seen_path, key in Backend.seen if seen_path == path]
        if set(keys) != set(accepted):
            missing = sorted(set(accepted) - set(keys))[0]
            connection = http.client.HTTPConnection("127.0.0.1", replicas[0][1], timeout=10)
            connection.request("GET", f"/queue/{missing}")
            sys.exit(f"{name} {path}: the backend saw {len(set(keys))} of {len(accepted)} writes; one missing: "
                     f"{connection.getresponse().read().decode()}")
        results.append(f"  {path} ({'concurrent' if path.endswith('events') else 'sequential'}, {writes} writes): "
                       f"accepted {writes / seconds:,.0f}/s (202 p50 {p50:.1f} ms, p99 {p99:.1f} ms), "
                       f"delivered {writes / delivered:,.0f}/s, {len(keys) - len(set(keys))} sent twice")
        Backend.seen = []
    for _, _, process in replicas:
        process.terminate()
        process.wait(timeout=30)
    print(f"{name}:")
    print("\n".join(results), flush=True)


def run(work):
    pg_port = services.postgres(work, fsync=True)
    postgres = f"postgres://sdui@127.0.0.1:{pg_port}/postgres"
    measure(work, "sqlite, 1 replica", 1, lambda number: os.path.join(work, f"queue-{number}"))
    measure(work, "postgres, 1 replica", 1, lambda number: postgres)
    # A new database would need creating; the same one is empty again once the first run delivered everything.
    measure(work, "postgres, 3 replicas", 3, lambda number: postgres)


if __name__ == "__main__":
    run_in_work_directory("sdui-queue-fleet.", services, run)
