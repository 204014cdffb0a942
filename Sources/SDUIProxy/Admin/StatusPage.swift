/// `GET /` on the admin listener: one self-contained HTML page, in the spirit of HAProxy's stats page.
///
/// No external assets and no build step: its script reads the same JSON and Prometheus endpoints an operator's
/// tools read (`/cache/stats`, `/metrics`, `/queue`, `/cluster`, `/ready`) every two seconds, from the same origin,
/// and keeps the last five minutes of samples in memory for the hit ratio and request rate. Behind the token like
/// every admin path: a browser is asked for it (`Basic`, the token as the password) and sends it with the page's
/// requests. Its `Content-Security-Policy` allows its own inline script and style and requests to its own origin
/// only.
enum StatusPage {
    static let path = "/"

    /// The answer: the page, never cached, never framed.
    static var response: AdminResponse {
        var response = AdminResponse(contentType: "text/html; charset=utf-8", body: html)
        response.headers = [
            (
                "Content-Security-Policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                    + "img-src data:; frame-ancestors 'none'"
            ),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
        ]
        return response
    }

    static let html = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <title>sdui-proxy status</title>
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <style>
          body { font: 14px/1.4 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
          header { background: #1d2330; color: #fff; padding: 10px 18px; display: flex; gap: 18px; align-items: baseline; }
          header h1 { font-size: 17px; margin: 0; }
          header span { opacity: .75; }
          main { display: grid; grid-template-columns: repeat(auto-fit, minmax(330px, 1fr)); gap: 14px; padding: 14px; }
          section { background: #fff; border-radius: 6px; padding: 12px 14px; box-shadow: 0 1px 2px #0002; }
          h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .04em; margin: 0 0 8px; color: #556; }
          .big { font-size: 28px; font-weight: 600; }
          table { border-collapse: collapse; width: 100%; }
          td, th { text-align: left; padding: 3px 6px; border-bottom: 1px solid #eee; font-variant-numeric: tabular-nums; }
          th { font-weight: 600; color: #556; }
          td.n { text-align: right; }
          .ok { color: #17803d; } .bad { color: #b42318; } .muted { color: #889; }
          svg { width: 100%; height: 60px; }
        </style>
        </head>
        <body>
        <header><h1>sdui-proxy</h1><span id="updated">loading…</span><span id="error" class="bad"></span></header>
        <main>
          <section><h2>Hit ratio (last 5 minutes)</h2><div class="big" id="hit-ratio">–</div><svg id="hit-chart" viewBox="0 0 300 60" preserveAspectRatio="none"></svg></section>
          <section><h2>Requests per second</h2><div class="big" id="rps">–</div><svg id="rps-chart" viewBox="0 0 300 60" preserveAspectRatio="none"></svg></section>
          <section><h2>Cache</h2><table id="cache"></table></section>
          <section><h2>Upstream</h2><table id="upstream"></table></section>
          <section><h2>Top screens by traffic</h2><table id="top-traffic"></table></section>
          <section><h2>Top screens by misses</h2><table id="top-misses"></table></section>
          <section><h2>Write queue</h2><table id="queue"></table></section>
          <section><h2>Prefetch and warm-up</h2><table id="prefetch"></table></section>
          <section><h2>Cluster</h2><table id="cluster"></table></section>
        </main>
        <script>
        "use strict";
        const samples = [];
        const windowMs = 5 * 60 * 1000;

        async function get(path, asText) {
          const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
          if (response.status === 404) return null;
          if (!response.ok) throw new Error(path + " answered " + response.status);
          return asText ? response.text() : response.json();
        }

        // The samples of the Prometheus text format: {name, labels, value}.
        function parseMetrics(text) {
          const out = [];
          for (const line of text.split("\n")) {
            if (!line || line.startsWith("#")) continue;
            const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
            if (!match) continue;
            const labels = {};
            const labelText = match[3] || "";
            for (const pair of labelText.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
            out.push({ name: match[1], labels: labels, value: Number(match[4]) });
          }
          return out;
        }

        function sum(metrics, name, filter) {
          return metrics.filter(m => m.name === name && (!filter || filter(m.labels))).reduce((a, m) => a + m.value, 0);
        }

        function cell(text, numeric) {
          const td = document.createElement("td");
          td.textContent = text;
          if (numeric) td.className = "n";
          return td;
        }

        function fill(id, rows, head) {
          const table = document.getElementById(id);
          table.replaceChildren();
          if (head) {
            const tr = document.createElement("tr");
            for (const h of head) { const th = document.createElement("th"); th.textContent = h; tr.appendChild(th); }
            table.appendChild(tr);
          }
          if (rows.length === 0) { const tr = document.createElement("tr"); tr.appendChild(cell("none")); tr.firstChild.className = "muted"; table.appendChild(tr); }
          for (const row of rows) {
            const tr = document.createElement("tr");
            row.forEach((value, index) => tr.appendChild(cell(String(value), index > 0 && typeof value === "number")));
            table.appendChild(tr);
          }
        }

        function chart(id, values, max) {
          const svg = document.getElementById(id);
          if (values.length < 2) { svg.innerHTML = ""; return; }
          const top = max || Math.max(...values, 1);
          const points = values.map((v, i) => (i * 300 / (values.length - 1)).toFixed(1) + "," + (58 - 56 * v / top).toFixed(1));
          svg.innerHTML = '<polyline fill="none" stroke="#2f6fdf" stroke-width="2" points="' + points.join(" ") + '"/>';
        }

        const bytes = n => n >= 1 << 20 ? (n / (1 << 20)).toFixed(1) + " MiB" : n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B";
        const percent = x => isFinite(x) ? (100 * x).toFixed(1) + " %" : "–";

        function topRoutes(metrics, cache) {
          const byRoute = new Map();
          for (const m of metrics) {
            if (m.name !== "sdui_route_requests_total" || (cache && m.labels.cache !== cache)) continue;
            const key = m.labels.route + " · " + m.labels.platform;
            byRoute.set(key, (byRoute.get(key) || 0) + m.value);
          }
          return [...byRoute.entries()].sort((a, b) => b[1] - a[1]).slice(0, 10);
        }

        async function refresh() {
          try {
            const [stats, metricsText, queue, cluster, ready] = await Promise.all([
              get("/cache/stats"), get("/metrics", true), get("/queue"), get("/cluster"),
              fetch("/ready", { credentials: "same-origin", cache: "no-store" }).then(r => r.json()),
            ]);
            const metrics = parseMetrics(metricsText);
            const now = Date.now();
            samples.push({ at: now, hits: stats.hits, misses: stats.misses, requests: sum(metrics, "sdui_requests_total") });
            while (samples.length > 2 && now - samples[0].at > windowMs) samples.shift();

            const first = samples[0], last = samples[samples.length - 1];
            const lookups = (last.hits - first.hits) + (last.misses - first.misses);
            const ratio = lookups > 0 ? (last.hits - first.hits) / lookups : stats.hits / Math.max(1, stats.hits + stats.misses);
            document.getElementById("hit-ratio").textContent = percent(ratio);
            const ratios = [], rates = [];
            for (let i = 1; i < samples.length; i++) {
              const a = samples[i - 1], b = samples[i];
              const l = (b.hits - a.hits) + (b.misses - a.misses);
              ratios.push(l > 0 ? (b.hits - a.hits) / l : ratio);
              rates.push((b.requests - a.requests) * 1000 / Math.max(1, b.at - a.at));
            }
            chart("hit-chart", ratios, 1);
            chart("rps-chart", rates);
            document.getElementById("rps").textContent = rates.length ? rates[rates.length - 1].toFixed(1) : "–";

            fill("cache", [
              ["entries", stats.entries], ["bytes", bytes(stats.bytes) + " of " + bytes(stats.maxBytes)],
              ["hits", stats.hits], ["misses", stats.misses], ["stale serves", stats.staleServes],
              ["revalidations", stats.revalidations], ["coalesced waits", stats.coalescedWaits],
              ["evictions", stats.evictions], ["purged", stats.purged],
            ]);
            const count = sum(metrics, "sdui_upstream_duration_seconds_count");
            const total = sum(metrics, "sdui_upstream_duration_seconds_sum");
            const errors = metrics.filter(m => m.name === "sdui_upstream_errors_total").map(m => ["errors: " + m.labels.kind, m.value]);
            fill("upstream", [["requests", count], ["mean latency", count > 0 ? (1000 * total / count).toFixed(1) + " ms" : "–"]].concat(errors));
            fill("top-traffic", topRoutes(metrics), ["route · platform", "responses"]);
            fill("top-misses", topRoutes(metrics, "MISS"), ["route · platform", "misses"]);
            fill("queue", queue ? [["depth", queue.depth]].concat(queue.routes.map(r => [r.route + " (" + (r.ordering || "?") + ")", r.depth])) : [["not configured", ""]]);
            const prefetch = metrics.filter(m => m.name === "sdui_prefetch_total").map(m => ["prefetches " + m.labels.outcome, m.value]);
            fill("prefetch", [["warm-up", ready.ready ? "done" : (ready.done + " of " + ready.total + (ready.failed ? ", " + ready.failed + " failing" : ""))]].concat(prefetch));
            fill("cluster", cluster && cluster.fleet
              ? [["replica", cluster.replica], ["connected", String(cluster.connected)], ["lag", cluster.lag]].concat(cluster.replicas.map(r => ["replica " + r.name, r.secondsSinceSeen + " s ago"]))
              : [["single replica", ""]]);
            document.getElementById("updated").textContent = "updated " + new Date(now).toLocaleTimeString();
            document.getElementById("error").textContent = "";
          } catch (error) {
            document.getElementById("error").textContent = String(error.message || error);
          }
        }
        refresh();
        setInterval(refresh, 2000);
        </script>
        </body>
        </html>
        """#
}
