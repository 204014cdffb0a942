import NIOHTTP1

/// Whether a request that failed on a reused keep-alive connection before any byte of an answer came back is
/// sent once more on a new connection.
///
/// The usual cause is a backend that closed the idle connection as the request went out, and then nothing was
/// applied. But the backend may also have taken the request and failed before answering, so only a request that
/// may be applied twice is sent again (RFC 9110 section 9.2.2: a proxy must not retry a non-idempotent request),
/// and only one whose body can be sent again: a body streamed from the client is gone once sent.
public enum StaleConnectionRetry {
    public static func mayResend(_ method: HTTPMethod, streamsBody: Bool) -> Bool {
        !streamsBody && method.isIdempotent
    }
}
