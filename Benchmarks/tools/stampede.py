#!/usr/bin/env python3
"""Stampede client: N concurrent GETs for one (cold) URL, all sent at the same moment.

Opens N connections first, then writes the N requests back to back, so they all reach the server while the
first one's fill is still in flight. Prints one JSON object: how many answered, their statuses, their X-Cache
values, and timings. Exits 0 when every request got a 200, 1 otherwise.

usage: stampede.py --port PORT --path /stampede/key [--host 127.0.0.1] [--clients 1000] [--timeout 30]
"""
import argparse
import asyncio
import collections
import json
import sys
import time


async def one(host, port, request, ready, start_gate, connect_timeout, timeout):
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), connect_timeout)
    except Exception as error:  # noqa: BLE001 - any failure is counted, never raised
        ready()
        await start_gate.wait()
        return ("connect-error", type(error).__name__, None)
    ready()
    try:
        await start_gate.wait()
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(-1), timeout)
    except Exception as error:  # noqa: BLE001
        writer.close()
        return ("io-error", type(error).__name__, None)
    writer.close()
    head, _, _ = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines or not lines[0].startswith("HTTP/"):
        return ("bad-response", repr(data[:60]), None)
    status = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "?"
    x_cache = "-"
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "x-cache":
            x_cache = value.strip()
    return ("ok", status, x_cache)


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()

    request = (
        f"GET {args.path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\n"
        "User-Agent: sdui-bench-stampede\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    gate = asyncio.Event()
    all_ready = asyncio.Event()
    pending = [args.clients]

    def ready():
        pending[0] -= 1
        if pending[0] == 0:
            all_ready.set()

    started = time.monotonic()
    tasks = [
        asyncio.create_task(one(args.host, args.port, request, ready, gate, args.timeout, args.timeout))
        for _ in range(args.clients)
    ]
    # Every connection is established (or has failed) before the requests go out together.
    try:
        await asyncio.wait_for(all_ready.wait(), args.timeout)
    except asyncio.TimeoutError:
        pass
    connected_after = time.monotonic() - started
    sent_at = time.monotonic()
    gate.set()
    results = await asyncio.gather(*tasks)
    finished = time.monotonic()

    statuses = collections.Counter()
    x_cache = collections.Counter()
    failures = collections.Counter()
    for kind, detail, cache in results:
        if kind == "ok":
            statuses[detail] += 1
            x_cache[cache] += 1
        else:
            failures[f"{kind}:{detail}"] += 1
    report = {
        "clients": args.clients,
        "answered": sum(statuses.values()),
        "statuses": dict(statuses),
        "x_cache": dict(x_cache),
        "failures": dict(failures),
        "connect_phase_s": round(connected_after, 3),
        "request_phase_s": round(finished - sent_at, 3),
    }
    print(json.dumps(report, sort_keys=True))
    return 0 if statuses.get("200", 0) == args.clients else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
