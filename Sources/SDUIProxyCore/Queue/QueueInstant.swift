#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A wall-clock time in milliseconds since the Unix epoch: queue times outlive the process, so they cannot be
/// monotonic uptime.
public struct QueueInstant: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public var millisecondsSinceEpoch: Int64

    /// The instant `millisecondsSinceEpoch` after the epoch.
    public init(millisecondsSinceEpoch: Int64) {
        self.millisecondsSinceEpoch = millisecondsSinceEpoch
    }

    /// The current wall-clock time.
    public static func now() -> QueueInstant {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return QueueInstant(millisecondsSinceEpoch: Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000)
    }

    public static func < (lhs: QueueInstant, rhs: QueueInstant) -> Bool {
        lhs.millisecondsSinceEpoch < rhs.millisecondsSinceEpoch
    }

    /// This instant moved by `duration` (rounded down to milliseconds).
    public func advanced(by duration: Duration) -> QueueInstant {
        let (seconds, attoseconds) = duration.components
        return QueueInstant(
            millisecondsSinceEpoch: millisecondsSinceEpoch + seconds * 1000 + attoseconds / 1_000_000_000_000_000
        )
    }

    /// The time from `earlier` to this instant (negative when `earlier` is later).
    public func duration(since earlier: QueueInstant) -> Duration {
        .milliseconds(millisecondsSinceEpoch - earlier.millisecondsSinceEpoch)
    }

    /// RFC 3339 in UTC with milliseconds (`2025-01-31T12:00:00.250Z`).
    public var description: String {
        var seconds = time_t(millisecondsSinceEpoch / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        let millis = Int32(millisecondsSinceEpoch % 1000)
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(millis, 3))Z"
    }
}
