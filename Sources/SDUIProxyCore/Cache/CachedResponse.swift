import NIOCore
import NIOHTTP1

/// A stored response: what a hit writes to the client, as it was encoded, plus what freshness needs.
///
/// Immutable and shared: one instance serves every hit and every coalesced waiter, and the body buffer is
/// written as it is, never copied.
public final class CachedResponse: Sendable {
    public let status: HTTPResponseStatus
    /// The headers sent to clients, without `Age`, `X-Cache` and connection-level headers.
    public let headers: HTTPHeaders
    public let body: ByteBuffer
    /// The strong validator of the body: the backend's `ETag`, or one computed from the content.
    public let etag: String
    /// When the response was stored, on the monotonic clock.
    public let storedAt: NIODeadline
    /// The response's corrected initial age, in seconds.
    public let initialAge: Int64
    /// How long the response is fresh, in seconds, counted from age 0.
    public let freshnessLifetime: Int64
    /// What the entry costs against the cache's byte budget.
    public let byteCost: Int

    public init(
        status: HTTPResponseStatus,
        headers: HTTPHeaders,
        body: ByteBuffer,
        etag: String,
        storedAt: NIODeadline,
        initialAge: Int64,
        freshnessLifetime: Int64
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.etag = etag
        self.storedAt = storedAt
        self.initialAge = initialAge
        self.freshnessLifetime = freshnessLifetime
        var headerBytes = 0
        for header in headers { headerBytes += header.name.utf8.count + header.value.utf8.count + 4 }
        // The fixed part approximates the entry's own object, key and table slot.
        self.byteCost = body.readableBytes + headerBytes + 256
    }

    /// The response's current age in nanoseconds (RFC 9111 section 4.2.3).
    @inline(__always)
    public func ageNanoseconds(at now: NIODeadline) -> Int64 {
        initialAge &* 1_000_000_000 &+ max(0, (now - storedAt).nanoseconds)
    }

    /// The current age in whole seconds, as the `Age` header carries it.
    @inline(__always)
    public func ageSeconds(at now: NIODeadline) -> Int64 {
        ageNanoseconds(at: now) / 1_000_000_000
    }

    /// Whether the response is still fresh at `now`.
    @inline(__always)
    public func isFresh(at now: NIODeadline) -> Bool {
        ageNanoseconds(at: now) < freshnessLifetime &* 1_000_000_000
    }
}
