import NIOCore

/// Where a connection handler reads the time for its deadlines: the wall clock, which a real event loop's timers
/// run on, or a test's event loop, whose clock only the test moves (an `EmbeddedEventLoop`), so that deadlines are
/// reached by advancing virtual time rather than by waiting.
///
/// Asking the wall clock directly, not the loop, spares the hit path a call through the loop's existential (about
/// 60 instructions a request over the two reads it makes).
struct ConnectionClock {
    private let loop: (any EventLoop)?

    /// The wall clock.
    static let wall = ConnectionClock(loop: nil)

    /// `loop`'s clock.
    static func of(_ loop: any EventLoop) -> ConnectionClock {
        ConnectionClock(loop: loop)
    }

    var now: NIODeadline {
        guard let loop else { return .now() }
        return loop.now
    }
}
