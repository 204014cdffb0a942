import NIOCore
import SDUIProxyCore

/// The endpoints of the admin listener.
enum AdminEndpoints {
    static func router(
        runtime: ProxyRuntime,
        prefetcher: Prefetcher,
        readiness: @escaping @Sendable () -> WarmUp.Progress,
        isDraining: @escaping @Sendable () -> Bool = { false }
    ) -> AdminRouter {
        var router = AdminRouter()
        router.register(.GET, "/health") { _, eventLoop in
            eventLoop.makeSucceededFuture(AdminResponse(json: #"{"status":"ok"}"#))
        }
        router.register(.GET, "/ready") { _, eventLoop in
            let progress = readiness()
            // Once the public listener has stopped accepting, the proxy is on its way out whatever it warmed up.
            let draining = isDraining()
            let ready = progress.isFinished && !draining
            let json =
                #"{"ready":\#(ready),"done":\#(progress.done),"total":\#(progress.total),"failed":\#(progress.failed)"#
                + (draining ? #","draining":true}"# : "}")
            return eventLoop.makeSucceededFuture(
                AdminResponse(status: ready ? .ok : .serviceUnavailable, json: json)
            )
        }
        router.register(.POST, "/prefetch") { request, eventLoop in
            PrefetchEndpoint(proxy: runtime.context, prefetcher: prefetcher).respond(to: request, on: eventLoop)
        }
        router.register(.GET, "/metrics") { _, eventLoop in
            let body = runtime.context.metrics.render()
            return eventLoop.makeSucceededFuture(AdminResponse(contentType: ProxyMetrics.contentType, body: body))
        }
        router.register(.GET, "/cache/stats") { _, eventLoop in
            eventLoop.makeSucceededFuture(AdminResponse(json: statisticsJSON(runtime.context)))
        }
        router.register(.DELETE, "/cache") { request, eventLoop in
            eventLoop.makeSucceededFuture(purge(request, cache: runtime.context.cache))
        }
        if let queue = runtime.context.writeQueue {
            router.register(.GET, "/queue") { _, eventLoop in
                eventLoop.makeFutureWithTask { await queue.overview() }
            }
            router.register(.GET, prefix: "/queue/") { request, eventLoop in
                let id = String(request.path.dropFirst("/queue/".count))
                return eventLoop.makeFutureWithTask { await queue.status(id: id) }
            }
        }
        return router
    }

    /// `DELETE /cache?url=PATH`, `?prefix=PATH`, `?tag=TAG`, or with no parameter, everything.
    ///
    /// `url=` takes the rest of the query string, so a target with a query of its own needs no encoding:
    /// `url=/search?q=a&page=2` purges `/search?q=a&page=2`. Written as it is (starting with `/`), it is
    /// normalised as request targets are, so `%20` or `%2F` in it mean what they mean in a request; encoded
    /// whole (`%2Fsearch%3Fq%3D...`), it is decoded once first (`+` stays `+`).
    static func purge(_ request: AdminRequest, cache: ResponseCache) -> AdminResponse {
        if let raw = request.rawQuery, raw.hasPrefix("url=") {
            let value = raw.dropFirst(4)
            let url = value.hasPrefix("/") ? String(value) : AdminHTTPHandler.percentDecoded(value, plusIsSpace: false)
            guard let url, let target = try? RequestTarget(parsing: url) else {
                return AdminResponse(ProxyError(.badRequest, "url must be a path starting with /"))
            }
            let removed = cache.purge(target: target.description)
            return AdminResponse(json: #"{"purged":\#(removed),"url":\#(JSONText.quoted(target.description))}"#)
        }
        let known: Set<String> = ["url", "prefix", "tag"]
        let given = request.query.keys.filter(known.contains)
        guard given.count <= 1, request.query.keys.allSatisfy(known.contains) else {
            return AdminResponse(
                ProxyError(.badRequest, "use one of url=, prefix= or tag=, or none to purge everything")
            )
        }
        let removed: Int
        let scope: String
        if request.query["url"] != nil {
            return AdminResponse(ProxyError(.badRequest, "url= must come first: it takes the rest of the query"))
        } else if let given = request.query["prefix"] {
            // Normalised as request targets are, so that it meets the keys' spelling; a trailing `?` (every
            // query of one path) is kept, where a target would drop it as an empty query.
            guard given.hasPrefix("/"), let target = try? RequestTarget(parsing: given) else {
                return AdminResponse(ProxyError(.badRequest, "prefix must be a path starting with /"))
            }
            let prefix = given.hasSuffix("?") && target.query == nil ? target.description + "?" : target.description
            removed = cache.purge(prefix: prefix)
            scope = #""prefix":\#(JSONText.quoted(prefix))"#
        } else if let tag = request.query["tag"] {
            guard !tag.isEmpty else { return AdminResponse(ProxyError(.badRequest, "tag must not be empty")) }
            removed = cache.purge(tag: tag)
            scope = #""tag":\#(JSONText.quoted(tag))"#
        } else {
            removed = cache.purgeAll()
            scope = #""all":true"#
        }
        return AdminResponse(json: #"{"purged":\#(removed),\#(scope)}"#)
    }

    static func statisticsJSON(_ proxy: ProxyContext) -> String {
        let statistics = proxy.cache.statistics
        let fields: [(String, Int)] = [
            ("entries", statistics.entries), ("bytes", statistics.bytes),
            ("maxBytes", proxy.configuration.cache.maxBytes),
            ("hits", statistics.hits), ("misses", statistics.misses), ("staleServes", statistics.staleServes),
            ("revalidations", statistics.revalidations), ("coalescedWaits", proxy.fetcher.coalescer.coalescedWaits),
            ("evictions", statistics.evictions), ("purged", statistics.purged), ("stores", statistics.stores),
        ]
        return "{" + fields.map { #""\#($0.0)":\#($0.1)"# }.joined(separator: ",") + "}"
    }
}
