import AsyncHTTPClient
import NIOCore
import SDUIProxyCore

/// The backend's time limits on one exchange, which AsyncHTTPClient has no form of (its `deadline` ends the whole
/// exchange, body included; its read timeout runs while the request is still being uploaded):
/// `upstream.timeout` for the response head, armed when the backend has the whole request, so a slow upload is
/// not charged to it; then `upstream.bodyIdleTimeout` for each silence of the body. The task is cancelled when
/// either runs out. Confined to one event loop.
final class ExchangeDeadlines: Sendable {
    /// Which limit ran out.
    enum Expiry {
        case head
        case body
    }

    private struct State {
        var cancel: (@Sendable () -> Void)?
        var timer: Scheduled<Void>?
        var expiry: Expiry?
        var started = false
        var headArrived = false
        /// The task ended: no timer is armed any more.
        var ended = false
        /// When the last body part (or the head) arrived, or the client took the last part.
        var lastArrival = NIODeadline.distantPast
        /// A part is with the client, and the backend is not read until it is taken: its silence is not its own.
        var waitingForClient = false
    }

    private let headTimeout: TimeAmount
    private let bodyIdleTimeout: TimeAmount
    /// Times are the loop's (`EventLoop.now`): the clock its timers run on.
    private let state: NIOLoopBoundBox<State>

    init(headTimeout: TimeAmount, bodyIdleTimeout: TimeAmount, eventLoop: any EventLoop) {
        self.headTimeout = headTimeout
        self.bodyIdleTimeout = bodyIdleTimeout
        // Made wherever the request is made; used only on `eventLoop`.
        self.state = .makeBoxSendingValue(State(), as: State.self, eventLoop: eventLoop)
    }

    /// Which limit ran out and cancelled the task, if one did. Read on the loop.
    var expiry: Expiry? { state.value.expiry }

    /// The error for the limit that ran out, if one did. Read on the loop.
    var error: ProxyError? {
        switch expiry {
        case .head: ProxyError(.timeout, "the backend did not answer in time")
        case .body: ProxyError(.timeout, "the backend stopped sending its response")
        case nil: nil
        }
    }

    /// Follows `task`: it is what a limit cancels, and its end disarms them.
    func watch<Response: Sendable>(_ task: HTTPClient.Task<Response>) {
        watch(ended: task.futureResult.map { _ in }, cancel: { task.cancel() })
    }

    /// Follows an exchange that `cancel` ends and that is over when `ended` completes.
    func watch(ended: EventLoopFuture<Void>, cancel: @escaping @Sendable () -> Void) {
        onLoop { state in
            state.value.cancel = cancel
            ended.hop(to: state.eventLoop).whenComplete { _ in
                state.value.ended = true
                state.value.timer?.cancel()
            }
        }
    }

    /// The backend has the whole request: its time for the head starts. Once.
    func start() {
        onLoop { state in
            guard !state.value.ended, !state.value.started, !state.value.headArrived else { return }
            state.value.started = true
            state.value.timer = state.eventLoop.scheduleTask(in: self.headTimeout) { self.expire(.head) }
        }
    }

    /// The final response head is in: from here the body's idle limit applies.
    func headArrived() {
        onLoop { state in
            guard !state.value.ended, !state.value.headArrived else { return }
            state.value.headArrived = true
            state.value.timer?.cancel()
            state.value.lastArrival = state.eventLoop.now
            self.armIdleTimer(at: state.value.lastArrival + self.bodyIdleTimeout)
        }
    }

    /// A part of the body arrived: the silence starts again. With `untilTaken`, the part is with a client that
    /// reads on only when it completes: the clock stops until then.
    func bodyPartArrived(untilTaken: EventLoopFuture<Void>? = nil) {
        onLoop { state in
            state.value.lastArrival = state.eventLoop.now
            guard let untilTaken else { return }
            state.value.waitingForClient = true
            untilTaken.hop(to: state.eventLoop).whenComplete { _ in
                state.value.waitingForClient = false
                state.value.lastArrival = state.eventLoop.now
            }
        }
    }

    /// Fires at the end of an idle period; re-armed from the last arrival when the body kept coming meanwhile,
    /// so a steady body costs one timer per period, not one per part.
    private func armIdleTimer(at deadline: NIODeadline) {
        let state = self.state
        state.value.timer = state.eventLoop.scheduleTask(deadline: deadline) {
            guard !state.value.ended else { return }
            let end =
                state.value.waitingForClient
                ? state.eventLoop.now + self.bodyIdleTimeout
                : state.value.lastArrival + self.bodyIdleTimeout
            if end <= state.eventLoop.now { self.expire(.body) } else { self.armIdleTimer(at: end) }
        }
    }

    private func expire(_ expiry: Expiry) {
        guard !state.value.ended, state.value.expiry == nil else { return }
        state.value.expiry = expiry
        state.value.cancel?()
    }

    private func onLoop(_ body: @escaping @Sendable (NIOLoopBoundBox<State>) -> Void) {
        let state = self.state
        if state.eventLoop.inEventLoop { body(state) } else { state.eventLoop.execute { body(state) } }
    }
}
