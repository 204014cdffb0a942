import NIOCore

/// Where the cache reads the time: when a response was asked for and received (its age, RFC 9111 section 4.2.3),
/// when an entry was stored, and when it is served.
///
/// The system's clocks in the proxy. A test that drives a connection on an `EmbeddedEventLoop` gives the cache that
/// loop's clock, whose time only the test moves: a response's age then cannot grow by a second because the machine
/// was busy between the request and its answer, or because the calendar's second turned meanwhile.
public struct CacheClock: Sendable {
    private let source: Source

    private enum Source: Sendable {
        case system
        /// Time read from `now`; calendar seconds count from `calendarSeconds` when `now` read `origin`.
        case following(now: @Sendable () -> NIODeadline, origin: NIODeadline, calendarSeconds: Int64)
    }

    /// The system's monotonic clock and its calendar clock.
    public static let system = CacheClock(source: .system)

    /// A clock that reads `now` (a test's loop's clock), its calendar time `calendarSeconds` at the time `now`
    /// reads when this is made.
    public static func following(
        _ now: @escaping @Sendable () -> NIODeadline,
        calendarSeconds: Int64
    ) -> CacheClock {
        CacheClock(source: .following(now: now, origin: now(), calendarSeconds: calendarSeconds))
    }

    /// The monotonic time: ages and lifetimes are measured on it.
    public var now: NIODeadline {
        switch source {
        case .system: .now()
        case .following(let now, _, _): now()
        }
    }

    /// The calendar time in whole seconds since the Unix epoch, as HTTP dates carry it.
    public var calendarSeconds: Int64 {
        switch source {
        case .system:
            return HTTPDate.now()
        case .following(let now, let origin, let calendarSeconds):
            return calendarSeconds + (now() - origin).nanoseconds / 1_000_000_000
        }
    }
}
