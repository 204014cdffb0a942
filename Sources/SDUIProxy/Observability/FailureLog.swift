import Logging
import NIOCore
import SDUIProxyCore
import Synchronization

/// Logs failures of the backend that repeat per request, at most once per key and kind an interval.
///
/// A backend outage fails every miss, every forwarded request and every stale refresh; one line each would be
/// megabytes a minute. ``RepeatedFailureThrottle`` decides; a line that follows left-out ones carries
/// `suppressed=N`. Only failure paths call it, so its lock is never taken by a hit.
public final class FailureLog: Sendable {
    /// How long one logged failure silences the same key and kind.
    public static let defaultInterval: TimeAmount = .seconds(10)

    private let logger: Logger
    private let throttle: Mutex<RepeatedFailureThrottle>
    /// The clock intervals are measured on: the monotonic one, or a test's.
    private let now: @Sendable () -> NIODeadline

    public init(
        logger: Logger,
        interval: TimeAmount = FailureLog.defaultInterval,
        now: @escaping @Sendable () -> NIODeadline = NIODeadline.now
    ) {
        self.logger = logger
        self.throttle = Mutex(RepeatedFailureThrottle(intervalNanoseconds: interval.nanoseconds))
        self.now = now
    }

    /// Logs `message` for `key` unless the same key and kind was logged within the interval.
    public func log(
        level: Logger.Level,
        _ message: @autoclosure () -> Logger.Message,
        key: String,
        kind: String,
        metadata: @autoclosure () -> Logger.Metadata
    ) {
        guard logger.logLevel <= level else { return }
        let now = Int64(now().uptimeNanoseconds)
        let decision = throttle.withLock { $0.record(key: key, kind: kind, now: now) }
        guard case .log(let suppressed) = decision else { return }
        var metadata = metadata()
        if suppressed > 0 { metadata["suppressed"] = "\(suppressed)" }
        logger.log(level: level, message(), metadata: metadata)
    }
}
