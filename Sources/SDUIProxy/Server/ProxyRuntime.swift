import NIOCore
import SDUIProxyCore
import Synchronization

/// The proxy's current ``ProxyContext``, replaced as a whole when the configuration is reloaded.
///
/// Connection handlers keep a copy of the context and compare ``generation`` (one atomic load) at each
/// request, so the hit path takes no lock; everything else reads ``context``.
public final class ProxyRuntime: Sendable {
    private let current: Mutex<ProxyContext>
    private let generationCounter = Atomic<Int>(0)

    public init(_ context: ProxyContext) {
        current = Mutex(context)
    }

    /// The context in force.
    public var context: ProxyContext { current.withLock { $0 } }

    /// Changes every time the context is replaced.
    @inline(__always)
    public var generation: Int { generationCounter.load(ordering: .acquiring) }

    /// Puts `context` in force for every request that starts from now on.
    func replace(with context: ProxyContext) {
        current.withLock { $0 = context }
        generationCounter.wrappingAdd(1, ordering: .releasing)
    }
}

/// A ``NetworkClient`` that always uses the runtime's current client, for long-lived users (the queue's
/// delivery service) that must follow an upstream changed by a reload.
struct CurrentNetworkClient: NetworkClient {
    let runtime: ProxyRuntime

    func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop
    )
        -> EventLoopFuture<UpstreamResponse>
    {
        runtime.context.client.fetch(request, maxBodyBytes: maxBodyBytes, on: eventLoop)
    }

    func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink
    ) -> EventLoopFuture<Void> {
        runtime.context.client.forward(request, body: body, on: eventLoop, to: sink)
    }

    func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        runtime.context.client.forward(request, body: body, on: eventLoop, to: sink, completion: completion)
    }

    var streamsResponses: Bool { runtime.context.client.streamsResponses }

    func shutdown() async throws {}
}
