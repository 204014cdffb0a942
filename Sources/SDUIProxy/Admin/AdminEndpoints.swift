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

    /// `DELETE /cache`: the invalidation ``PurgeRequest`` reads from the query, applied to `cache`.
    static func purge(_ request: AdminRequest, cache: ResponseCache, now: NIODeadline = .now()) -> AdminResponse {
        do {
            let invalidation = try PurgeRequest.invalidation(rawQuery: request.rawQuery)
            return AdminResponse(
                json: PurgeRequest.answer(invalidation, reached: cache.invalidate(invalidation, now: now))
            )
        } catch {
            return AdminResponse(error)
        }
    }

    static func statisticsJSON(_ proxy: ProxyContext) -> String {
        let statistics = proxy.cache.statistics
        let fields: [(String, Int)] = [
            ("entries", statistics.entries), ("bytes", statistics.bytes),
            ("maxBytes", proxy.configuration.cache.maxBytes),
            ("hits", statistics.hits), ("misses", statistics.misses), ("staleServes", statistics.staleServes),
            ("revalidations", statistics.revalidations), ("coalescedWaits", proxy.fetcher.coalescer.coalescedWaits),
            ("evictions", statistics.evictions), ("purged", statistics.purged), ("softPurged", statistics.softPurged),
            ("stores", statistics.stores),
        ]
        return "{" + fields.map { #""\#($0.0)":\#($0.1)"# }.joined(separator: ",") + "}"
    }
}
