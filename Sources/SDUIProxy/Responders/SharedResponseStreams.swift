import NIOCore
import SDUIProxyCore
import Synchronization

/// The ``SharedResponseStream``s in flight, by cache key and forwarded request: identical misses of a response too
/// large to store join the one whose head has not come yet, instead of each sending the backend a request of its
/// own (as a fill's coalesced waiters share its exchange). Only requests that would reach the backend the same,
/// but for who sent them (``CacheFillPolicy/streamSharingIdentity(upstreamFields:)``), share.
final class SharedResponseStreams: Sendable {
    private struct Key: Hashable {
        var cacheKey: CacheKey
        var request: String
    }

    private let streams = Mutex<[Key: SharedResponseStream]>([:])

    init() {}

    /// Subscribes `subscriber` to the stream in flight for `key` whose head has not come, and answers nil; or,
    /// when there is none, makes one with `subscriber` as its first, and answers it: the caller then makes the
    /// exchange, with the stream as its sink, and calls ``ended(_:_:)`` when it ends.
    func joinOrLead(
        _ cacheKey: CacheKey,
        request identity: String,
        _ subscriber: SharedResponseStream.Subscriber,
        on eventLoop: any EventLoop
    ) -> SharedResponseStream? {
        let key = Key(cacheKey: cacheKey, request: identity)
        return streams.withLock { streams in
            if let current = streams[key], current.subscribe(subscriber) { return nil }
            let stream = SharedResponseStream(eventLoop: eventLoop)
            _ = stream.subscribe(subscriber)
            streams[key] = stream
            return stream
        }
    }

    /// Forgets `stream`, whose exchange ended, unless a newer one for the same request has replaced it.
    func ended(_ cacheKey: CacheKey, request identity: String, _ stream: SharedResponseStream) {
        let key = Key(cacheKey: cacheKey, request: identity)
        streams.withLock { streams in
            if streams[key] === stream { streams[key] = nil }
        }
    }

    /// How many streams are in flight, and how many clients they serve.
    var load: (streams: Int, subscribers: Int) {
        streams.withLock { streams in (streams.count, streams.values.reduce(0) { $0 + $1.subscriberCount }) }
    }
}
