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
            let ready = progress.isReady && !draining
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
        router.register(.GET, StatusPage.path) { _, eventLoop in
            eventLoop.makeSucceededFuture(StatusPage.response)
        }
        router.register(.GET, "/metrics") { _, eventLoop in
            let body = runtime.context.metrics.render()
            return eventLoop.makeSucceededFuture(AdminResponse(contentType: ProxyMetrics.contentType, body: body))
        }
        router.register(.GET, "/cache/stats") { _, eventLoop in
            eventLoop.makeSucceededFuture(AdminResponse(json: statisticsJSON(runtime.context)))
        }
        router.register(.GET, "/cache/entries") { request, eventLoop in
            let cache = runtime.context.cache
            do throws(ProxyError) {
                let body = try CacheEntriesView.list(rawQuery: request.rawQuery, cache: cache, now: .now())
                return eventLoop.makeSucceededFuture(AdminResponse(json: body))
            } catch {
                return eventLoop.makeSucceededFuture(AdminResponse(error))
            }
        }
        router.register(.GET, "/cache/entry") { request, eventLoop in
            let cache = runtime.context.cache
            do throws(ProxyError) {
                return eventLoop.makeSucceededFuture(
                    try CacheEntriesView.entry(rawQuery: request.rawQuery, cache: cache, now: .now())
                )
            } catch {
                return eventLoop.makeSucceededFuture(AdminResponse(error))
            }
        }
        router.register(.DELETE, "/cache") { request, eventLoop in
            purge(request, invalidator: runtime.context.invalidator, on: eventLoop)
        }
        router.register(.GET, "/cluster") { _, eventLoop in
            guard let fleet = runtime.context.invalidator.fleet else {
                return eventLoop.makeSucceededFuture(AdminResponse(json: #"{"fleet":false}"#))
            }
            return eventLoop.makeFutureWithTask { AdminResponse(json: clusterJSON(await fleet.refreshedStatus())) }
        }
        if let queue = runtime.context.writeQueue {
            router.register(.GET, "/queue") { _, eventLoop in
                eventLoop.makeFutureWithTask { await queue.overview() }
            }
            router.register(.GET, prefix: "/queue/") { request, eventLoop in
                let id = String(request.path.dropFirst("/queue/".count))
                // `/queue/identifiers/LOCAL`: what became of a create's local identifier (a queue id is hex).
                if id.hasPrefix("identifiers/") {
                    let local = String(id.dropFirst("identifiers/".count))
                    return eventLoop.makeFutureWithTask { await queue.identifierStatus(local) }
                }
                return eventLoop.makeFutureWithTask { await queue.status(id: id) }
            }
        } else {
            // Not a plain "no endpoint": the operator asked the right path of a proxy that has no queue.
            let notConfigured: AdminRouter.Endpoint = { _, eventLoop in
                eventLoop.makeSucceededFuture(
                    AdminResponse(
                        ProxyError(
                            .notFound,
                            "the write queue is not configured (the configuration has no queue section)"
                        )
                    )
                )
            }
            router.register(.GET, "/queue", notConfigured)
            router.register(.GET, prefix: "/queue/", notConfigured)
        }
        return router
    }

    /// `DELETE /cache`: the invalidation ``PurgeRequest`` reads from the query, applied here and, in a fleet,
    /// answered once the fleet's log has it (or it is known to be pending).
    static func purge(
        _ request: AdminRequest,
        invalidator: CacheInvalidator,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<AdminResponse> {
        let invalidation: CacheInvalidation
        do {
            invalidation = try PurgeRequest.invalidation(rawQuery: request.rawQuery)
        } catch {
            return eventLoop.makeSucceededFuture(AdminResponse(error))
        }
        return eventLoop.makeFutureWithTask {
            let (reached, fanOut) = await invalidator.invalidateAcrossFleet(invalidation)
            return AdminResponse(json: PurgeRequest.answer(invalidation, reached: reached, fanOut: fanOut))
        }
    }

    /// `GET /cluster`: this replica's name, whether it is connected to the fleet's log, its cursor, how far behind
    /// the log's head it is, the invalidations waiting to be written, and the replicas seen in the last minute.
    static func clusterJSON(_ status: FleetLog.Status) -> String {
        let replicas = status.replicas.map { replica in
            #"{"name":\#(JSONText.quoted(replica.name)),"cursor":\#(replica.appliedID),"#
                + #""secondsSinceSeen":\#((replica.secondsSinceSeen * 10).rounded() / 10)}"#
        }
        let cursor = status.appliedID.map(String.init) ?? "null"
        let lag = status.appliedID.map { String(max(0, status.headID - $0)) } ?? "null"
        return #"{"fleet":true,"replica":\#(JSONText.quoted(status.replicaName)),"connected":\#(status.connected),"#
            + #""cursor":\#(cursor),"head":\#(status.headID),"lag":\#(lag),"pending":\#(status.pending),"#
            + #""replicas":[\#(replicas.joined(separator: ","))]}"#
    }

    static func statisticsJSON(_ proxy: ProxyContext) -> String {
        let statistics = proxy.cache.statistics
        let fields: [(String, Int)] = [
            ("entries", statistics.entries), ("bytes", statistics.bytes),
            ("maxBytes", proxy.configuration.cache.maxBytes),
            ("hits", statistics.hits), ("misses", statistics.misses), ("staleServes", statistics.staleServes),
            ("revalidations", statistics.revalidations), ("coalescedWaits", proxy.fetcher.coalescer.coalescedWaits),
            ("evictions", statistics.evictions), ("purged", statistics.purged), ("softPurged", statistics.softPurged),
            ("stores", statistics.stores), ("partialEntries", statistics.partialEntries),
            ("partialHits", statistics.partialHits),
        ]
        let sent = proxy.metrics.storedFormsSent()
        let forms = RequestTally.formLabels
        let compression: [(String, String)] = [
            ("entries", String(statistics.compressedEntries)),
            ("bodyBytes", object(forms.map { ($0, String(statistics.bodyBytesByForm[$0] ?? 0)) })),
            ("sent", object(forms.map { ($0, String(sent.byForm[$0] ?? 0)) })),
            ("savedBytes", String(sent.savedBytes)),
            ("skipped", String(proxy.fetcher.compressionPool?.refusedJobs ?? 0)),
            ("dropped", String(statistics.compressionsDropped)),
        ]
        return object(fields.map { ($0.0, String($0.1)) } + [("compression", object(compression))])
    }

    /// A JSON object of `members`, whose values are JSON already (numbers, objects).
    private static func object(_ members: [(String, String)]) -> String {
        "{" + members.map { #""\#($0.0)":\#($0.1)"# }.joined(separator: ",") + "}"
    }
}
