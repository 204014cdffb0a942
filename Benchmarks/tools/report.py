#!/usr/bin/env python3
"""Turns the raw results of Benchmarks/run.sh into markdown tables (medians over rounds) and ratios.

usage: report.py RESULTS_DIR

RESULTS_DIR holds (each optional, tab-separated, with a header line):
  runs.tsv      scenario target conns round requests duration_us rps p50_us p99_us errors cpu_us rss_kb hits misses other
                [steal_pct: the machine's CPU steal during the run, in %]
                [conn_split: established connections per server process, mid-run, largest first ("12/4")]
                [bytes: bytes wrk read over the run, headers included]
                [sys_us: the part of cpu_us spent in the kernel]
  stampede.tsv  target clients answered ok origin_requests x_cache failures
  memory.tsv    target entries misses rss_before_kb rss_after_kb payload_bytes [cache_bytes_per_entry]
  gzip-check.tsv  target status x_cache content_encoding gzip_body_bytes content_length vary gunzipped_equals_fixture
  instructions.tsv  kind target round requests user_instructions instructions cycles
  speeds.tsv    target restart requests user_instructions user_cycles kernel_instructions kernel_cycles
  h2-handshakes.tsv  target round connections succeeded errors duration_us handshakes_per_s cpu_us steal_pct tls cipher key
  notes.txt     free-form lines printed under "Notes"
  meta.txt      key=value lines (date, host, rounds, duration, ...)
The last line printed is always `hit-cpu-per-request ratio vs nginx: X.XX` (or n/a when no hit data exists);
when the hit-gzip scenario ran, `gzip-hit-cpu-per-request ratio vs nginx gzip: X.XX` comes just before it, and when
the h2-hit scenario ran, `h2-hit-cpu-per-request ratio vs nginx h2: X.XX` before those.
"""
import csv
import os
import statistics
import sys

ANCHORS = ("nginx", "varnish")
LABEL = {
    "proxy": "sdui-proxy",
    "nginx": "nginx proxy_cache",
    "nginx-nocache": "nginx (no cache)",
    "nginx-reuseport": "nginx proxy_cache, reuseport",
    "nginx-gzip": "nginx proxy_cache + gzip (level 1)",
    "varnish": "Varnish",
    "varnish-gzip": "Varnish, stored gzip",
    "proxy-uncompressed": "sdui-proxy, compression off",
    "proxy-h2": "sdui-proxy, TLS + h2",
    "nginx-h2": "nginx proxy_cache, TLS + h2",
}
# Targets of the hit-gzip scenario and of the memory scenario's second proxy row.
GZIP_CPU_TARGET = 0.60  # the proxy's CPU per gzip hit, at most this fraction of nginx's (gzip at every hit)
GZIP_VS_IDENTITY = 0.10  # the proxy's gzip hit within this of its identity hit (CPU/request and req/s)
MEMORY_UNCOMPRESSED_TARGET = 1.20  # RSS per entry with compression off, at most this times the payload
H2_CPU_TARGET = 1.00  # the proxy's CPU per HTTP/2 hit over TLS, at most nginx's (TLS + h2 proxy_cache)
# Targets of the miss and pass scenarios, against nginx proxying without a cache (the floor: the same reads and
# writes, nothing validated or stored) and the caches that store misses too.
MISS_CPU_TARGET = 1.50  # the proxy's CPU per miss, at most this times nginx's without a cache
MISS_RATE_TARGET = 1.00  # the proxy's miss rate, at least each storing cache's (nginx proxy_cache, Varnish)
PASS_CPU_TARGET = 1.30  # the proxy's CPU per pass-through GET, at most this times nginx's without a cache


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def num(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def fmt(value, digits=0):
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(value):
    return "n/a" if value is None else f"{value:.2f}"


def summarize(runs, scenario):
    """{(target, conns): medians} for one scenario."""
    groups = {}
    for row in runs:
        if row["scenario"] != scenario:
            continue
        groups.setdefault((row["target"], int(row["conns"])), []).append(row)
    result = {}
    for key, rows in groups.items():
        per_req = [
            num(r["cpu_us"]) / num(r["requests"]) if num(r["requests"]) else None for r in rows
        ]
        # Runs recorded before the split was kept have no sys_us.
        sys_per_req = [
            num(r.get("sys_us")) / num(r["requests"])
            if num(r["requests"]) and num(r.get("sys_us")) is not None
            else None
            for r in rows
        ]
        per_response = [
            num(r.get("bytes")) / num(r["requests"]) if num(r["requests"]) and num(r.get("bytes")) is not None else None
            for r in rows
        ]
        hit_ratio = []
        for r in rows:
            h, m = num(r["hits"]) or 0, num(r["misses"]) or 0
            hit_ratio.append(h / (h + m) if h + m > 0 else None)
        result[key] = {
            "rounds": len(rows),
            "rps": median(num(r["rps"]) for r in rows),
            "p50": median(num(r["p50_us"]) for r in rows),
            "p99": median(num(r["p99_us"]) for r in rows),
            "cpu": median(per_req),
            "sys": median(sys_per_req),
            "rss": median(num(r["rss_kb"]) for r in rows),
            "errors": sum(int(num(r["errors"]) or 0) for r in rows),
            "hit_ratio": median(hit_ratio),
            "steal": median(num(r.get("steal_pct")) for r in rows),
            "splits": [r.get("conn_split") or "n/a" for r in rows],
            "bytes": median(per_response),
        }
    return result


def target_order(target):
    order = [
        "proxy-uncompressed", "proxy", "proxy-h2", "nginx", "nginx-reuseport", "nginx-gzip", "nginx-h2", "nginx-nocache",
        "varnish", "varnish-gzip",
    ]
    return order.index(target) if target in order else len(order)


def ms(us):
    return None if us is None else us / 1000.0


def print_checked_ratios(rows, proxy, checks):
    """One row per connection count: `proxy` against each anchor in `checks`, a list of (anchor, metric, bound),
    metric "cpu" (at most bound) or "rps" (at least bound; a bound of None prints the ratio unchecked). Prints
    nothing when `proxy` did not run; an anchor that did not run is left out."""
    if not any(t == proxy for (t, _) in rows):
        return
    checks = [c for c in checks if any(t == c[0] for (t, _) in rows)]
    if not checks:
        return
    header, rule = "| conns |", "|---:|"
    for anchor, metric, bound in checks:
        what = "CPU/req" if metric == "cpu" else "req/s"
        header += f" {what} ÷ {LABEL.get(anchor, anchor)} |"
        rule += "---:|"
        if bound is not None:
            header += f" {'≤' if metric == 'cpu' else '≥'} {bound:.2f} |"
            rule += ":---:|"
    print(f"{LABEL.get(proxy, proxy)} against the anchors:")
    print()
    print(header)
    print(rule)
    for conns in sorted({c for (_, c) in rows}):
        p = rows.get((proxy, conns))
        row = f"| {conns} |"
        for anchor, metric, bound in checks:
            a = rows.get((anchor, conns))
            r = ratio(p and p[metric], a and a[metric])
            row += f" {fmt_ratio(r)} |"
            if bound is not None:
                row += " " + verdict(r, (lambda v: v <= bound) if metric == "cpu" else (lambda v: v >= bound)) + " |"
        print(row)
    print()


def print_scenario_table(title, stats, with_hits=False, with_bytes=False, conns_label="conns"):
    print(f"### {title}")
    print()
    header = f"| target | {conns_label} | req/s | p50 ms | p99 ms | server CPU µs/req |"
    line = "|---|---:|---:|---:|---:|---:|"
    # The kernel's part of the CPU (system calls, the network stack): beside the whole, it says whether two servers
    # differ in their own code or in what they ask of the kernel.
    with_sys = any(s["sys"] is not None for s in stats.values())
    if with_sys:
        header += " of which system |"
        line += "---:|"
    header += " server RSS MiB |"
    line += "---:|"
    if with_hits:
        header += " hit ratio |"
        line += "---:|"
    if with_bytes:
        header += " bytes/response |"
        line += "---:|"
    header += " errors | steal % |"
    line += "---:|---:|"
    with_splits = any(split != "n/a" for s in stats.values() for split in s["splits"])
    if with_splits:
        header += " conns per process, each round |"
        line += "---|"
    print(header)
    print(line)
    for (target, conns) in sorted(stats, key=lambda k: (k[1], target_order(k[0]))):
        s = stats[(target, conns)]
        row = (
            f"| {LABEL.get(target, target)} | {conns} | {fmt(s['rps'])} | {fmt(ms(s['p50']), 2)} | "
            f"{fmt(ms(s['p99']), 2)} | {fmt(s['cpu'], 1)} |"
        )
        if with_sys:
            row += f" {fmt(s['sys'], 1)} |"
        row += f" {fmt(None if s['rss'] is None else s['rss'] / 1024, 1)} |"
        if with_hits:
            hit_ratio = s["hit_ratio"]
            row += " n/a |" if hit_ratio is None else f" {hit_ratio * 100:.1f} % |"
        if with_bytes:
            row += f" {fmt(s['bytes'])} |"
        row += f" {s['errors']} | {fmt(s['steal'], 1)} |"
        if with_splits:
            row += f" {', '.join(s['splits'])} |"
        print(row)
    print()


def print_anchor_ratios(stats, metrics):
    """One row per connection count: proxy ÷ each anchor (nginx, Varnish, and nginx with reuseport when it ran)
    for each (key, label) in metrics."""
    anchors = [("nginx", "nginx"), ("varnish", "Varnish")]
    if any(target == "nginx-reuseport" for (target, _) in stats):
        anchors.insert(1, ("nginx-reuseport", "nginx reuseport"))
    print("| conns | " + " | ".join(f"{label} ÷ {name}" for _, label in metrics for _, name in anchors) + " |")
    print("|---:|" + "---:|" * (len(anchors) * len(metrics)))
    for conns in sorted({c for (_, c) in stats}):
        p = stats.get(("proxy", conns))
        rows = [stats.get((target, conns)) for target, _ in anchors]
        cells = [fmt_ratio(ratio(p and p[key], a and a[key])) for key, _ in metrics for a in rows]
        print(f"| {conns} | " + " | ".join(cells) + " |")
    print()


def verdict(value, ok):
    return "n/a" if value is None else ("yes" if ok(value) else "**no**")


def print_gzip_hits(gzip_hits, hits, checks):
    """The hit-gzip scenario: its table, the proxy against the anchors (CPU per gzip hit against nginx's, with its
    target), against its own identity hits of the hit scenario in the same run, and what each target's gzip
    answer looked like before the load. Returns the proxy ÷ nginx-gzip CPU ratio at 64 connections."""
    print_scenario_table(
        "Gzip hits: the hit URL with Accept-Encoding: gzip (the proxy and Varnish answer a gzip form stored once; "
        "nginx gzips its cached body at every hit, level 1)",
        gzip_hits,
        with_bytes=True,
    )
    conns_all = sorted({c for (_, c) in gzip_hits})
    if any(t == "proxy" for (t, _) in gzip_hits) and any(t == "nginx-gzip" for (t, _) in gzip_hits):
        with_varnish = any(t == "varnish-gzip" for (t, _) in gzip_hits)
        print(
            f"The proxy against the anchors (CPU/request: lower is better, target ≤ {GZIP_CPU_TARGET:.2f}× nginx's; "
            "req/s: higher is better):"
        )
        print()
        header = f"| conns | CPU/req proxy ÷ nginx gzip | target ≤ {GZIP_CPU_TARGET:.2f} | req/s proxy ÷ nginx gzip | p99 proxy ÷ nginx gzip |"
        rule = "|---:|---:|:---:|---:|---:|"
        if with_varnish:
            header += " CPU/req proxy ÷ Varnish gzip | req/s proxy ÷ Varnish gzip |"
            rule += "---:|---:|"
        print(header)
        print(rule)
        for conns in conns_all:
            p, n, v = (gzip_hits.get((t, conns)) for t in ("proxy", "nginx-gzip", "varnish-gzip"))
            cpu = ratio(p and p["cpu"], n and n["cpu"])
            row = (
                f"| {conns} | {fmt_ratio(cpu)} | {verdict(cpu, lambda x: x <= GZIP_CPU_TARGET)} | "
                f"{fmt_ratio(ratio(p and p['rps'], n and n['rps']))} | {fmt_ratio(ratio(p and p['p99'], n and n['p99']))} |"
            )
            if with_varnish:
                row += f" {fmt_ratio(ratio(p and p['cpu'], v and v['cpu']))} | {fmt_ratio(ratio(p and p['rps'], v and v['rps']))} |"
            print(row)
        print()
    if any(t == "proxy" for (t, _) in gzip_hits) and any(t == "proxy" for (t, _) in hits):
        print(
            "The proxy's gzip hit against its own identity hit (the hit scenario, same run; target: CPU/request and "
            f"req/s within {GZIP_VS_IDENTITY * 100:.0f} %):"
        )
        print()
        print(
            "| conns | CPU µs/req identity | CPU µs/req gzip | gzip ÷ identity | req/s identity | req/s gzip | "
            f"gzip ÷ identity | within {GZIP_VS_IDENTITY * 100:.0f} % | bytes/response identity | bytes/response gzip |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|")
        for conns in conns_all:
            g, i = gzip_hits.get(("proxy", conns)), hits.get(("proxy", conns))
            if g is None or i is None:
                continue
            cpu, rps = ratio(g["cpu"], i["cpu"]), ratio(g["rps"], i["rps"])
            within = "n/a"
            if cpu is not None and rps is not None:
                ok = cpu <= 1 + GZIP_VS_IDENTITY and rps >= 1 - GZIP_VS_IDENTITY
                within = "yes" if ok else "**no**"
            print(
                f"| {conns} | {fmt(i['cpu'], 1)} | {fmt(g['cpu'], 1)} | {fmt_ratio(cpu)} | {fmt(i['rps'])} | "
                f"{fmt(g['rps'])} | {fmt_ratio(rps)} | {within} | {fmt(i['bytes'])} | {fmt(g['bytes'])} |"
            )
        print()
    if checks:
        print("Each target's gzip answer, checked before the load (one curl; bytes/response above are wrk's, headers included):")
        print()
        print("| target | X-Cache | Content-Encoding | gzip body bytes | Content-Length | Vary | gunzips to the fixture |")
        print("|---|---|---|---:|---:|---|---|")
        for row in sorted(checks, key=lambda r: target_order(r["target"])):
            print(
                f"| {LABEL.get(row['target'], row['target'])} | {row['x_cache']} | {row['content_encoding']} | "
                f"{fmt(num(row['gzip_body_bytes']))} | {row['content_length']} | {row['vary']} | "
                f"{row['gunzipped_equals_fixture']} |"
            )
        print()
    p, n = gzip_hits.get(("proxy", 64)), gzip_hits.get(("nginx-gzip", 64))
    return ratio(p and p["cpu"], n and n["cpu"])


def print_h2_hits(h2_hits, handshakes, meta):
    """The h2-hit scenario: its table (streams in all = h2load clients × streams per client), the proxy ÷ nginx
    ratios with the CPU target, and TLS handshakes per second. Returns the proxy-h2 ÷ nginx-h2 CPU ratio at 64
    streams."""
    clients = meta.get("h2_clients", "?")
    print_scenario_table(
        f"HTTP/2 hits over TLS (h2load, {clients} connections, the streams in flight split evenly over them; "
        "both fronts on the same self-signed P-256 certificate)",
        h2_hits,
        with_bytes=True,
        conns_label="streams",
    )
    if any(t == "proxy-h2" for (t, _) in h2_hits) and any(t == "nginx-h2" for (t, _) in h2_hits):
        print(
            f"The proxy against nginx over TLS + h2 (CPU/request: lower is better, target ≤ {H2_CPU_TARGET:.2f}× "
            "nginx's; req/s: higher is better; p99: lower is better):"
        )
        print()
        print(
            f"| streams | streams per connection | CPU/req proxy ÷ nginx h2 | target ≤ {H2_CPU_TARGET:.2f} | "
            "req/s proxy ÷ nginx h2 | p99 proxy ÷ nginx h2 |"
        )
        print("|---:|---:|---:|:---:|---:|---:|")
        for streams in sorted({c for (_, c) in h2_hits}):
            p, n = h2_hits.get(("proxy-h2", streams)), h2_hits.get(("nginx-h2", streams))
            cpu = ratio(p and p["cpu"], n and n["cpu"])
            per_connection = fmt(streams / num(clients)) if num(clients) else "?"
            print(
                f"| {streams} | {per_connection} | {fmt_ratio(cpu)} | {verdict(cpu, lambda x: x <= H2_CPU_TARGET)} | "
                f"{fmt_ratio(ratio(p and p['rps'], n and n['rps']))} | {fmt_ratio(ratio(p and p['p99'], n and n['p99']))} |"
            )
        print()
    if handshakes:
        per = {}
        for row in handshakes:
            done = num(row["connections"])
            entry = per.setdefault(row["target"], {"rate": [], "cpu": [], "errors": 0, "rounds": 0, "tls": set(), "n": []})
            entry["rate"].append(num(row["handshakes_per_s"]))
            entry["cpu"].append(num(row["cpu_us"]) / done if done else None)
            entry["errors"] += int(num(row["errors"]) or 0)
            entry["rounds"] += 1
            entry["n"].append(done)
            entry["tls"].add(f"{row['tls']} {row['cipher']} {row['key']}")
        print(
            "TLS handshakes: {n} h2load clients at once, each a new TLS connection (full handshake, no resumption), "
            "ALPN h2 and one request (-c {n} -n {n} -m 1); medians over rounds:".format(n=meta.get("h2_handshakes", "?"))
        )
        print()
        print("| target | handshakes/s | server CPU µs/handshake | connections per round | rounds | errors | TLS |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for target in sorted(per, key=target_order):
            e = per[target]
            print(
                f"| {LABEL.get(target, target)} | {fmt(median(e['rate']))} | {fmt(median(e['cpu']), 1)} | "
                f"{fmt(median(e['n']))} | {e['rounds']} | {e['errors']} | {', '.join(sorted(e['tls']))} |"
            )
        print()
        if "proxy-h2" in per and "nginx-h2" in per:
            p, n = per["proxy-h2"], per["nginx-h2"]
            print(
                f"- handshakes: proxy ÷ nginx h2: handshakes/s {fmt_ratio(ratio(median(p['rate']), median(n['rate'])))}, "
                f"CPU/handshake {fmt_ratio(ratio(median(p['cpu']), median(n['cpu'])))}"
            )
            print()
    p, n = h2_hits.get(("proxy-h2", 64)), h2_hits.get(("nginx-h2", 64))
    return ratio(p and p["cpu"], n and n["cpu"])


def print_instructions(rows):
    """Instructions and cycles per request (medians over rounds), from perf stat, and the proxy ÷ nginx ratios."""
    if not rows:
        return
    per = {}
    for row in rows:
        requests = num(row["requests"])
        if not requests:
            continue
        key = (row["kind"], row["target"])
        per.setdefault(key, {"user": [], "all": [], "cycles": []})
        per[key]["user"].append(num(row["user_instructions"]) / requests)
        per[key]["all"].append(num(row["instructions"]) / requests)
        if num(row["cycles"]):
            per[key]["cycles"].append(num(row["cycles"]) / requests)
    print("### Instructions per request (perf stat; counts, steadier than times)")
    print()
    print("| kind | target | user-space instructions | all instructions | cycles | user-space ÷ nginx |")
    print("|---|---|---:|---:|---:|---:|")
    for (kind, target) in sorted(per, key=lambda k: (k[0], target_order(k[1]))):
        values = per[(kind, target)]
        user = median(values["user"])
        anchor = per.get((kind, "nginx" if kind == "hit" else "nginx-nocache"))
        r = ratio(user, anchor and median(anchor["user"])) if target == "proxy" else None
        cycles = median(values["cycles"]) if values["cycles"] else None
        print(
            f"| {kind} | {LABEL.get(target, target)} | {fmt(user)} | {fmt(median(values['all']))} | "
            f"{fmt(cycles)} | {fmt_ratio(r) if target == 'proxy' else ''} |"
        )
    print()


def print_speeds(runs, counters):
    """Miss rates per origin restart (runs.tsv rows of the speeds scenario), with perf's counts per request."""
    rows = [row for row in runs if row["scenario"] == "speeds" and row["round"] != "warm"]
    if not rows:
        return
    counted = {(row["target"], row["restart"]): row for row in counters}
    rates = {}
    print("### Miss speeds across origin restarts (each restart: new backend connections for every target)")
    print()
    print(
        "| restart | target | req/s | CPU µs/req | user instructions | user cycles | kernel instructions | kernel cycles |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in sorted(rows, key=lambda r: (int(r["round"]), target_order(r["target"]))):
        requests = num(row["requests"])
        if not requests:
            continue
        rates.setdefault(row["target"], []).append(num(row["rps"]))
        # The counts come from a run of their own (counting slows a server), so per request of that run.
        counts = counted.get((row["target"], row["round"]), {})
        counted_requests = num(counts.get("requests"))
        per = [
            num(counts.get(k)) / counted_requests if counted_requests and num(counts.get(k)) else None
            for k in ("user_instructions", "user_cycles", "kernel_instructions", "kernel_cycles")
        ]
        print(
            f"| {row['round']} | {LABEL.get(row['target'], row['target'])} | {fmt(num(row['rps']))} | "
            f"{fmt(num(row['cpu_us']) / requests, 1)} | " + " | ".join(fmt(value) for value in per) + " |"
        )
    print()
    for target in sorted(rates, key=target_order):
        values = rates[target]
        print(f"- {LABEL.get(target, target)}: {fmt(min(values))} to {fmt(max(values))} req/s, median {fmt(median(values))}")
    print()


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = sys.argv[1]
    runs = read_tsv(os.path.join(directory, "runs.tsv"))
    meta = {}
    meta_path = os.path.join(directory, "meta.txt")
    if os.path.exists(meta_path):
        for line in open(meta_path):
            key, _, value = line.rstrip("\n").partition("=")
            if key:
                meta[key] = value

    print("## sdui-proxy load benchmark")
    print()
    if meta:
        print(
            "{date} · {cpus} CPUs · wrk -t{threads} · {rounds} round(s) × {duration} per run · "
            "medians over rounds · payload {payload} bytes".format(
                date=meta.get("date", "?"),
                cpus=meta.get("cpus", "?"),
                threads=meta.get("wrk_threads", "?"),
                rounds=meta.get("rounds", "?"),
                duration=meta.get("duration", "?"),
                payload=meta.get("payload_bytes", "?"),
            )
        )
        print()

    hit_cpu_ratio = None

    hits = summarize(runs, "hit")
    if hits:
        print_scenario_table("Hits: one cached component, every request a fresh hit", hits)
        print("Ratios, proxy / anchor (throughput: higher is better; p99 and CPU/request: lower is better):")
        print()
        print_anchor_ratios(hits, [("rps", "req/s"), ("p99", "p99"), ("cpu", "CPU/req")])
        p, n = hits.get(("proxy", 64)), hits.get(("nginx", 64))
        hit_cpu_ratio = ratio(p and p["cpu"], n and n["cpu"])

    latency = summarize(runs, "latency")
    if latency:
        print_scenario_table(
            "Latency at one offered load: the hit URL at {rate} requests/s in all, paced per connection".format(
                rate=meta.get("latency_rate", "?")
            ),
            latency,
        )
        print("Ratios, proxy / anchor at the same offered load (lower is better):")
        print()
        print_anchor_ratios(latency, [("p50", "p50"), ("p99", "p99")])

    gzip_cpu_ratio = None
    gzip_ran = False
    gzip_hits = summarize(runs, "hit-gzip")
    if gzip_hits:
        gzip_ran = True
        gzip_cpu_ratio = print_gzip_hits(gzip_hits, hits, read_tsv(os.path.join(directory, "gzip-check.tsv")))

    h2_cpu_ratio = None
    h2_ran = False
    h2_hits = summarize(runs, "h2-hit")
    handshakes = read_tsv(os.path.join(directory, "h2-handshakes.tsv"))
    if h2_hits or handshakes:
        h2_ran = True
        h2_cpu_ratio = print_h2_hits(h2_hits, handshakes, meta)

    misses = summarize(runs, "miss")
    if misses:
        print_scenario_table(
            "Misses: every URL unique (the proxy validates and stores each, and with compression on makes the "
            "coding its client takes on its pool, none for wrk's; nginx without a cache forwards it; nginx "
            "proxy_cache and Varnish forward and store it)",
            misses,
        )
        # CPU against the floor (nginx forwarding without a cache); the miss rate against the caches that store
        # each miss too (nginx's proxy_cache writes it to its cache directory, Varnish to its malloc storage).
        # With compression on (the default) the proxy makes the coding a miss's client takes, on its pool (none for
        # wrk's, which send no Accept-Encoding); the row with compression off does the job the anchors do.
        checks = [
            ("nginx-nocache", "cpu", MISS_CPU_TARGET),
            ("nginx", "rps", MISS_RATE_TARGET),
            ("varnish", "rps", MISS_RATE_TARGET),
            ("nginx-nocache", "rps", None),
        ]
        for proxy in ("proxy-uncompressed", "proxy"):
            print_checked_ratios(misses, proxy, checks)

    passes = summarize(runs, "pass")
    if passes:
        print_scenario_table("Pass-through: unique GETs on a bypass route (both forward without a cache)", passes)
        print_checked_ratios(passes, "proxy", [("nginx-nocache", "cpu", PASS_CPU_TARGET), ("nginx-nocache", "rps", None)])

    mixed = summarize(runs, "mixed")
    if mixed:
        print_scenario_table(
            "Mixed: Zipf keys over a key set larger than the cache (eviction at work); hit ratio from X-Cache",
            mixed,
            with_hits=True,
        )

    print_instructions(read_tsv(os.path.join(directory, "instructions.tsv")))
    print_speeds(runs, read_tsv(os.path.join(directory, "speeds.tsv")))

    stampede = read_tsv(os.path.join(directory, "stampede.tsv"))
    proxy_stampede = None
    if stampede:
        print("### Stampede: concurrent requests for one cold key (origin slowed to ~1 s)")
        print()
        print("| target | clients | answered 200 | X-Cache | failures | origin requests |")
        print("|---|---:|---:|---|---|---:|")
        for row in sorted(stampede, key=lambda r: target_order(r["target"])):
            print(
                f"| {LABEL.get(row['target'], row['target'])} | {row['clients']} | {row['ok']} | {row['x_cache']} | "
                f"{row['failures']} | {row['origin_requests']} |"
            )
            if row["target"] == "proxy":
                proxy_stampede = row["origin_requests"]
        print()

    memory = read_tsv(os.path.join(directory, "memory.tsv"))
    if memory:
        # The proxy row is the default config: store-time compression on, once the binary has it.
        compression = meta.get("proxy_compression")
        memory_label = dict(LABEL)
        if compression == "yes" or any(r["target"] == "proxy-uncompressed" for r in memory):
            memory_label["proxy"] = "sdui-proxy, compression on (default)"
        elif compression == "no":
            memory_label["proxy"] = "sdui-proxy (binary without compression)"
        per_entry_of = {}
        print("### Memory: RSS growth per cached entry")
        print()
        print(
            "| target | entries loaded | misses seen | RSS before MiB | RSS after MiB | RSS bytes/entry | payload bytes "
            "| RSS bytes/entry ÷ payload | cache-accounted bytes/entry |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for row in sorted(memory, key=lambda r: target_order(r["target"])):
            entries = num(row["entries"]) or 0
            before, after = num(row["rss_before_kb"]), num(row["rss_after_kb"])
            payload = num(row["payload_bytes"])
            per_entry = (after - before) * 1024 / entries if entries and before is not None and after is not None else None
            per_entry_of[row["target"]] = (per_entry, payload)
            print(
                f"| {memory_label.get(row['target'], row['target'])} | {fmt(entries)} | {row['misses']} | "
                f"{fmt(before / 1024 if before is not None else None, 1)} | {fmt(after / 1024 if after is not None else None, 1)} | "
                f"{fmt(per_entry)} | {fmt(payload)} | {fmt_ratio(ratio(per_entry, payload))} | "
                f"{fmt(num(row.get('cache_bytes_per_entry')))} |"
            )
        print()
        if "proxy-uncompressed" in per_entry_of:
            per_entry, payload = per_entry_of["proxy-uncompressed"]
            r = ratio(per_entry, payload)
            print(
                f"- compression off: RSS per entry {fmt_ratio(r)}× the payload, target ≤ "
                f"{MEMORY_UNCOMPRESSED_TARGET:.2f}×: {verdict(r, lambda x: x <= MEMORY_UNCOMPRESSED_TARGET)}"
            )
            if "proxy" in per_entry_of:
                on = ratio(per_entry_of["proxy"][0], per_entry)
                print(f"- compression on ÷ off: RSS per entry {fmt_ratio(on)}×")
            print()

    notes_path = os.path.join(directory, "notes.txt")
    if os.path.exists(notes_path):
        notes = [line.rstrip("\n") for line in open(notes_path) if line.strip()]
        if notes:
            print("### Notes")
            print()
            for note in notes:
                print(f"- {note}")
            print()

    if proxy_stampede is not None:
        print(f"stampede origin requests: {proxy_stampede}")
    if h2_ran:
        print(f"h2-hit-cpu-per-request ratio vs nginx h2: {fmt_ratio(h2_cpu_ratio)}")
    if gzip_ran:
        print(f"gzip-hit-cpu-per-request ratio vs nginx gzip: {fmt_ratio(gzip_cpu_ratio)}")
    print(f"hit-cpu-per-request ratio vs nginx: {fmt_ratio(hit_cpu_ratio)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
