import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Synchronization
import Testing

@testable import SDUIProxy

/// When the fetcher tells its observer (the prefetcher) of a stored component: after the fetch's caller has
/// its answer, so that the prefetches the observer starts never go out ahead of the response that caused them.
@Suite struct StoredComponentObserverTests {
    /// A backend that answers every request at once, on the requesting loop, with one component.
    private struct OneComponentClient: NetworkClient {
        let body: String

        func fetch(
            _ request: UpstreamRequest,
            maxBodyBytes: Int,
            on eventLoop: any EventLoop
        )
            -> EventLoopFuture<UpstreamResponse>
        {
            let headers: HTTPHeaders = ["Content-Type": "application/json", "Cache-Control": "max-age=60"]
            return eventLoop.makeSucceededFuture(
                UpstreamResponse(status: .ok, headers: headers, body: ByteBuffer(string: body))
            )
        }

        func forward(
            _ request: UpstreamRequest,
            body: RequestBodyStream?,
            on eventLoop: any EventLoop,
            to sink: any ForwardedResponseSink
        ) -> EventLoopFuture<Void> {
            eventLoop.makeFailedFuture(ProxyError(.network, "this backend only answers cache fills"))
        }

        func shutdown() async throws {}
    }

    /// Records, when told of a stored component, whether the fetch's completion had run by then.
    private final class RecordingObserver: StoredComponentObserver {
        let completionRan = Atomic(false)
        let notified: EventLoopPromise<(completionHadRun: Bool, targets: [String])>

        init(notified: EventLoopPromise<(completionHadRun: Bool, targets: [String])>) {
            self.notified = notified
        }

        func componentStored(
            _ plan: PrefetchPlanner.Plan,
            by request: ComponentFetcher.Request,
            on eventLoop: any EventLoop
        ) {
            notified.succeed((completionRan.load(ordering: .relaxed), plan.targets))
        }
    }

    @Test("the observer hears of a stored component after the fetch's completion has run")
    func observerIsToldAfterTheCompletion() async throws {
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()

        let component = #"""
            {"_beagleComponent_":"beagle:button","text":"Next",
            "onPress":{"_beagleAction_":"beagle:pushView","route":{"url":"/screens/next","shouldPrefetch":true}}}
            """#
        let fetcher = ComponentFetcher(
            cache: ResponseCache(maxBytes: 1 << 20, maxEntries: 100),
            client: OneComponentClient(body: component),
            maxResponseBytes: 1 << 20,
            platformHeader: "X-Platform",
            tagHeader: "Surrogate-Key",
            storageRules: StorageRules(),
            metrics: ProxyMetrics(),
            coalescer: RequestCoalescer(maximumWait: .seconds(5)),
            prefetchPlanner: PrefetchPlanner(
                upstream: try UpstreamOrigin(parsing: "http://127.0.0.1:9"),
                allowedHosts: []
            ),
            logger: Logger(label: "test")
        )
        let notified = eventLoop.makePromise(of: (completionHadRun: Bool, targets: [String]).self)
        let observer = RecordingObserver(notified: notified)
        fetcher.observeStoredComponents(observer)
        // A bounded wait: an observer never told fails the test instead of hanging it.
        let deadline = eventLoop.scheduleTask(in: .seconds(10)) {
            notified.fail(ProxyError(.timeout, "the observer was never told of the stored component"))
        }
        defer { deadline.cancel() }

        let request = ComponentFetcher.Request(
            key: CacheKey(target: "/screens/home", platform: "WEB"),
            upstream: UpstreamRequest(method: .GET, target: "/screens/home", headers: [:]),
            policy: ProxyConfiguration.RoutePolicy(),
            clientHeaders: [:],
            mayCoalesce: true,
            followActions: 1
        )
        let answered = eventLoop.makePromise(of: ComponentFetcher.Outcome.self)
        eventLoop.execute {
            fetcher.fetch(request, on: eventLoop) { result, _ in
                observer.completionRan.store(true, ordering: .relaxed)
                answered.completeWith(result)
            }
        }

        guard case .stored = try await answered.futureResult.get() else {
            Issue.record("the component was not stored")
            return
        }
        let heard = try await notified.futureResult.get()
        #expect(heard.completionHadRun)
        #expect(heard.targets == ["/screens/next"])
    }
}
