import Foundation
import NIOCore
import SDUIProxyCore

/// `POST /prefetch` on the admin listener: `{"urls": [...], "platforms": [...], "followActions": N}`
/// (platforms and followActions optional) fetches every URL for every platform now and answers per pair:
/// `{"results": [{"url", "platform", "status": "cached" | "failed" | "uncacheable", "bytes", "error"}]}`.
///
/// With `"fleet": true` every replica of the fleet runs it too (through the fleet's log), and the answer adds
/// `"fleet": {"fanOut", "took", "replicas"}`: whether the log has it, how many replicas took it within a couple of
/// seconds (this one included) and how many were seen in the last minute. A single replica answers
/// `{"took": 1, "replicas": 1}`. The results are this replica's.
///
/// A malformed body or a wrong type is a 400 for the whole call; a URL that cannot be prefetched fails alone.
struct PrefetchEndpoint {
    let proxy: ProxyContext
    let prefetcher: Prefetcher

    /// The most distinct platforms one request may name.
    static let maximumPlatforms = 16

    func respond(to request: AdminRequest, on eventLoop: any EventLoop) -> EventLoopFuture<AdminResponse> {
        let limits = proxy.configuration.prefetch
        guard let bytes = request.body, bytes.readableBytes > 0 else {
            return eventLoop.makeSucceededFuture(
                AdminResponse(ProxyError(.badRequest, #"the body must be {"urls": [...]}"#))
            )
        }
        guard bytes.readableBytes <= limits.maxRequestBytes else {
            return eventLoop.makeSucceededFuture(
                AdminResponse(
                    ProxyError(.tooLarge, "the body exceeds prefetch.maxRequestBytes (\(limits.maxRequestBytes) bytes)")
                )
            )
        }
        let body: PrefetchRequest
        do {
            body = try PrefetchRequest.parse(Data(bytes.readableBytesView))
        } catch {
            return eventLoop.makeSucceededFuture(AdminResponse(error))
        }
        guard !body.urls.isEmpty, body.urls.count <= limits.maxURLsPerRequest else {
            return eventLoop.makeSucceededFuture(
                AdminResponse(ProxyError(.badRequest, "urls must list 1 to \(limits.maxURLsPerRequest) URLs"))
            )
        }
        let followActions = body.followActions ?? limits.followActions
        guard (0...10).contains(followActions) else {
            return eventLoop.makeSucceededFuture(
                AdminResponse(ProxyError(.badRequest, "followActions must be 0 to 10"))
            )
        }
        // Each platform once, and few of them: every URL is fetched for each, so a long list of names (any name
        // is a platform when `platform.allowed` is empty) would multiply one request into millions of fetches.
        var platforms: [String] = []
        for name in body.platforms ?? limits.platforms {
            do {
                let platform = try proxy.router.platform(of: .init([(proxy.configuration.platform.header, name)]))
                if !platforms.contains(platform) { platforms.append(platform) }
            } catch {
                return eventLoop.makeSucceededFuture(AdminResponse(error))
            }
            // Checked as the list is read, which keeps `contains` over at most this many.
            guard platforms.count <= Self.maximumPlatforms else {
                return eventLoop.makeSucceededFuture(
                    AdminResponse(ProxyError(.badRequest, "platforms must list at most \(Self.maximumPlatforms) names"))
                )
            }
        }

        let results = Self.run(
            urls: body.urls,
            platforms: platforms,
            followActions: followActions,
            prefetcher: prefetcher,
            on: eventLoop
        )
        guard body.fleet == true else {
            return results.map { AdminResponse(json: #"{"results":[\#($0.joined(separator: ","))]}"#) }
        }
        // Only URLs this replica could resolve go to the others: the rest fail alone here, with their reason.
        let resolvable = body.urls.filter { (try? prefetcher.resolve($0).get()) != nil }
        let fleet = proxy.invalidator.fleet
        let prefetch = FleetPrefetch(urls: resolvable, platforms: platforms, followActions: followActions)
        let fanOut = eventLoop.makeFutureWithTask { () -> String in
            guard let fleet, !prefetch.urls.isEmpty else { return #"{"took":1,"replicas":1}"# }
            let (fanOut, took, replicas) = await fleet.prefetched(prefetch)
            return #"{"fanOut":"\#(fanOut.rawValue)","took":\#(took),"replicas":\#(replicas)}"#
        }
        return results.and(fanOut).map { results, fleet in
            AdminResponse(json: #"{"results":[\#(results.joined(separator: ","))],"fleet":\#(fleet)}"#)
        }
    }

    /// Prefetches every URL for every platform on this replica; the results' JSON, one per pair, in order. Fleet
    /// prefetches of other replicas run here the same way.
    static func run(
        urls: [String],
        platforms: [String],
        followActions: Int,
        prefetcher: Prefetcher,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<[String]> {
        var pairs: [(url: String, platform: String, outcome: EventLoopFuture<Prefetcher.Outcome>)] = []
        for url in urls {
            let resolved = prefetcher.resolve(url)
            for platform in platforms {
                let outcome: EventLoopFuture<Prefetcher.Outcome>
                switch resolved {
                case .success(let target):
                    outcome = prefetcher.prefetch(target: target, platform: platform, followActions: followActions)
                case .failure(let reason):
                    outcome = eventLoop.makeSucceededFuture(.failed(ProxyError(.url, "cannot prefetch: \(reason)")))
                }
                pairs.append((url, platform, outcome))
            }
        }
        let labels = pairs.map { (url: $0.url, platform: $0.platform) }
        return EventLoopFuture.whenAllSucceed(pairs.map(\.outcome), on: eventLoop).map { outcomes in
            zip(labels, outcomes).map { label, outcome in
                Self.resultJSON(url: label.url, platform: label.platform, outcome)
            }
        }
    }

    private static func resultJSON(url: String, platform: String, _ outcome: Prefetcher.Outcome) -> String {
        let bytes = if case .cached(let size, _, _) = outcome { size } else { 0 }
        let error = outcome.failureReason.map(JSONText.quoted) ?? "null"
        return #"{"url":\#(JSONText.quoted(url)),"platform":\#(JSONText.quoted(platform)),"#
            + #""status":"\#(outcome.name)","bytes":\#(bytes),"error":\#(error)}"#
    }
}
