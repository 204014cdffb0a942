#!/usr/bin/env python3
"""How long a purge on one replica takes to be in force on the others.

Starts a throwaway PostgreSQL (initdb and postgres from the installed packages, as `nobody` when run as root), an
origin, and three sdui-proxy replicas sharing the database, all on 127.0.0.1. Then, ROUNDS times: every replica
stores /screens/home (a miss, then a hit), one replica (in turn) is purged through its admin listener, and from the
purge's answer each other replica is asked for the screen, over a kept-alive connection, until it answers a miss.
Prints the latencies' p50, p99 and maximum. Everything it starts is stopped by PID at the end.

    BIN=.build/release/sdui-proxy Benchmarks/tools/fleet-fanout.py          # ROUNDS=200 by default
"""
import http.client
import http.server
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from local_services import Services, free_port, run_in_work_directory, wait_for  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "200"))
BIN = os.environ.get("BIN", ".build/release/sdui-proxy")
BODY = b'{"_beagleComponent_":"beagle:screenComponent","id":"home","children":[]}'
services = Services()


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out in two writes: without this, the second waits for the proxy's delayed ACK of
    # the first (40 ms), and every miss would measure that.
    disable_nagle_algorithm = True

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "max-age=300")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


def main():
    run_in_work_directory("sdui-fleet-fanout.", services, run)


def run(work):
    pg_port = services.postgres(work)

    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()

    replicas = []
    for name in "abc":
        port, admin = free_port(), free_port()
        config = os.path.join(work, f"{name}.yaml")
        with open(config, "w") as f:
            f.write(f"""listen: {{ host: 127.0.0.1, port: {port} }}
admin: {{ host: 127.0.0.1, port: {admin} }}
upstream: {{ url: "http://127.0.0.1:{origin.server_port}" }}
cluster: {{ postgres: "postgres://sdui@127.0.0.1:{pg_port}/postgres", replicaName: "{name}" }}
log: {{ level: error }}
""")
        services.start([BIN, "--config", config])
        replicas.append((port, admin))
    for port, admin in replicas:
        def connected(admin=admin):
            connection = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
            connection.request("GET", "/cluster")
            return b'"connected":true' in connection.getresponse().read()
        wait_for("a replica", connected)

    clients = [http.client.HTTPConnection("127.0.0.1", port, timeout=5) for port, _ in replicas]
    admins = [http.client.HTTPConnection("127.0.0.1", admin, timeout=5) for _, admin in replicas]

    def get(index):
        clients[index].request("GET", "/screens/home")
        response = clients[index].getresponse()
        response.read()
        return response.getheader("X-Cache")

    latencies = []
    for round_ in range(ROUNDS):
        for index in range(3):
            get(index)
            if get(index) != "HIT":
                sys.exit(f"replica {index} did not store the screen")
        purged = round_ % 3
        admins[purged].request("DELETE", "/cache?url=/screens/home")
        answer = admins[purged].getresponse().read()
        answered = time.monotonic()
        if b'"fanOut":"recorded"' not in answer:
            sys.exit(f"the purge was not recorded: {answer!r}")
        for index in range(3):
            if index == purged:
                continue
            deadline = answered + 5
            while get(index) != "MISS":
                if time.monotonic() > deadline:
                    sys.exit(f"replica {index} still served the purged screen 5 s after the purge")
            latencies.append(time.monotonic() - answered)

    # The part of it spent between a row's write and its reading by the other replicas, from their metrics.
    for index, (_, admin) in enumerate(replicas):
        admins[index].request("GET", "/metrics")
        text = admins[index].getresponse().read().decode()
        total = [line for line in text.splitlines() if line.startswith("sdui_fleet_fanout_lag_seconds_")]
        sums = {line.split()[0]: float(line.split()[1]) for line in total if "_sum" in line or "_count" in line}
        count = next((v for k, v in sums.items() if k.endswith("_count")), 0)
        if count:
            mean = next(v for k, v in sums.items() if k.endswith("_sum")) / count * 1000
            print(f"replica {'abc'[index]}: {int(count)} rows read, mean {mean:.2f} ms from write to read")

    latencies.sort()
    def at(q):
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
    print(f"purge fan-out over {len(latencies)} replica-purges ({ROUNDS} rounds, 3 replicas): "
          f"p50 {at(0.5):.2f} ms, p99 {at(0.99):.2f} ms, max {latencies[-1] * 1000:.2f} ms")


if __name__ == "__main__":
    main()
