import NIOCore
import NIOPosix
import SDUIProxyCore

/// The connections of one event loop, and the requests waiting for one when all are busy.
///
/// What happens is decided by an ``UpstreamPoolStateMachine``: this class tells it every event (a request, a
/// connection established, released or closed, a waiter's deadline) and does what it answers: connect, send an
/// exchange on a connection, schedule or cancel a waiter's timeout, fail a request, close a connection.
///
/// Confined to its event loop: it is created with the client (for the group's loops) or under the client's
/// lock (for others), and otherwise used from ``run(_:completion:)``, ``closeAll()`` and its connections'
/// callbacks, which run on that loop (checked where it is entered from outside).
final class PoolState: UpstreamConnectionEvents, @unchecked Sendable {
    typealias ConnectionID = UpstreamPoolStateMachine.ConnectionID
    typealias WaiterID = UpstreamPoolStateMachine.WaiterID

    let eventLoop: any EventLoop
    private let host: String
    private let port: Int
    private let tls: UpstreamTLS?
    private let connectTimeout: TimeAmount
    private var machine: UpstreamPoolStateMachine
    /// The connections the machine counts, by identifier (``IdentifierTable``, not a dictionary that hashed the
    /// identifier for every exchange).
    private var connections = IdentifierTable<UpstreamConnectionHandler>()
    /// The requests the machine knows as waiters that are not served yet: parked, or waiting for a connection
    /// opened for them. A request that finds an idle connection never comes here.
    private var waiting: [WaiterID: Waiter] = [:]

    private struct Waiter {
        var exchange: LoopLocalHTTPClient.Exchange
        var retryIfStale: Bool
        var completion: Completion
        /// The parked waiter's timeout.
        var timeout: Scheduled<Void>?
    }

    init(
        eventLoop: any EventLoop,
        host: String,
        port: Int,
        tls: UpstreamTLS? = nil,
        connectTimeout: TimeAmount,
        maximumConnections: Int,
        maximumForwardConnections: Int? = nil,
        closed: Bool = false
    ) {
        self.eventLoop = eventLoop
        self.host = host
        self.port = port
        self.tls = tls
        self.connectTimeout = connectTimeout
        self.machine = UpstreamPoolStateMachine(limit: maximumConnections, forwardLimit: maximumForwardConnections)
        // A pool made after its client shut down has no connection to close and no waiter to fail.
        if closed { _ = machine.shutdown() }
    }

    /// What an exchange's caller is told, once, on the pool's loop.
    typealias Completion = @Sendable (Result<UpstreamResponse, any Error>) -> Void

    /// Runs `exchange` on an idle connection, a new one, or the first to come free.
    func run(_ exchange: LoopLocalHTTPClient.Exchange, completion: @escaping Completion) {
        eventLoop.preconditionInEventLoop()
        start(exchange, retryOnStaleConnection: exchange.mayResend, completion: completion)
    }

    /// The common case, an idle connection ready, takes no future, no callback and no entry in ``waiting``: the
    /// machine's answer is values only, and the connection keeps `completion` and hands it back to
    /// ``exchangeEnded(_:on:_:retryIfStale:_:)``.
    private func start(
        _ exchange: LoopLocalHTTPClient.Exchange,
        retryOnStaleConnection: Bool,
        completion: @escaping Completion
    ) {
        // Each turn either sends, or counts out an idle connection found closed: it ends within one turn per
        // idle connection.
        while true {
            let action = machine.leaseRequested(deadline: exchange.deadline, for: exchange.use)
            switch action {
            case .lease(let id, _):
                guard let connection = connections[id.rawValue], connection.isUsable else {
                    // Closed without the pool hearing of it yet: counted out now (and not again when it is).
                    connections[id.rawValue]?.close()
                    connectionClosed(id)
                    continue
                }
                send(exchange, on: connection, retryIfStale: retryOnStaleConnection, completion: completion)
            case .open(let id, let waiter):
                waiting[waiter] = Waiter(exchange: exchange, retryIfStale: false, completion: completion)
                connect(id, deadline: exchange.deadline)
            case .park(let waiter, let deadline):
                waiting[waiter] = Waiter(
                    exchange: exchange,
                    retryIfStale: false,
                    completion: completion,
                    timeout: eventLoop.scheduleTask(deadline: deadline) { self.waiterTimedOut(waiter) }
                )
            case .fail(_, let failure):
                completion(.failure(Self.proxyError(failure, cause: nil)))
            case .none, .close, .failAndOpen, .failAndLease, .closeAndOpen, .closeAndLease:
                preconditionFailure("a request for a connection cannot be answered with \(action)")
            }
            return
        }
    }

    /// What `connection` tells its pool when the exchange it was sent ends: the connection is free again, or
    /// the exchange goes once more on another one.
    func exchangeEnded(
        _ result: Result<UpstreamResponse, any Error>,
        on connection: UpstreamConnectionHandler,
        _ exchange: LoopLocalHTTPClient.Exchange,
        retryIfStale: Bool,
        _ completion: @escaping Completion
    ) {
        switch result {
        case .success(let response):
            perform(machine.connectionReleased(connection.id, reusable: connection.isUsable, now: .now()))
            completion(.success(response))
        case _ where Self.sendsAgain(result, retryIfStale: retryIfStale):
            // The backend closed a reused idle connection as the request went out: nothing was answered.
            perform(machine.connectionReleased(connection.id, reusable: false))
            start(exchange, retryOnStaleConnection: false, completion: completion)
        case .failure(let error):
            perform(machine.connectionReleased(connection.id, reusable: false))
            completion(.failure(Self.proxyError(error)))
        }
    }

    /// Whether an exchange that ended with `result` goes once more, on another connection: only when it failed
    /// before any of an answer came, on a connection that may have been stale.
    static func sendsAgain(_ result: Result<UpstreamResponse, any Error>, retryIfStale: Bool) -> Bool {
        guard retryIfStale, case .failure(UpstreamConnectionHandler.Failure.closedBeforeResponse) = result else {
            return false
        }
        return true
    }

    /// What a connection tells its pool when it closes: from its channel going inactive and again from its close
    /// future. The machine counts it out once.
    func connectionClosed(_ id: ConnectionID) {
        connections[id.rawValue] = nil
        perform(machine.connectionClosed(id, now: .now()))
    }

    func closeAll() {
        eventLoop.preconditionInEventLoop()
        let shutdown = machine.shutdown()
        for id in shutdown.close { connections[id.rawValue]?.close() }
        for waiter in shutdown.fail { perform(.fail(waiter, .shuttingDown)) }
    }

    private func waiterTimedOut(_ waiter: WaiterID) {
        waiting[waiter]?.timeout = nil
        perform(machine.waiterTimedOut(waiter))
    }

    /// Runs an action for a waiter in ``waiting`` or for a connection; `cause` is the error that made the
    /// connection fail, when that is what the action is about.
    private func perform(_ action: UpstreamPoolStateMachine.Action, cause: (any Error)? = nil) {
        switch action {
        case .none:
            break
        case .lease(let id, let waiterID):
            guard let waiter = take(waiterID) else { return }
            guard let connection = connections[id.rawValue], connection.isUsable else {
                // Closed as it was handed over (an idle one, given to a forward, may have been closed by the
                // backend): counted out, and the request goes again, as if on a stale connection.
                connections[id.rawValue]?.close()
                connectionClosed(id)
                return start(waiter.exchange, retryOnStaleConnection: false, completion: waiter.completion)
            }
            send(waiter.exchange, on: connection, retryIfStale: waiter.retryIfStale, completion: waiter.completion)
        case .open(let id, let waiterID):
            guard let waiter = waiting[waiterID] else { return }
            waiter.timeout?.cancel()
            waiting[waiterID]?.timeout = nil
            connect(id, deadline: waiter.exchange.deadline)
        case .park:
            preconditionFailure("only a request for a connection parks")
        case .fail(let waiterID, let failure):
            take(waiterID)?.completion(.failure(Self.proxyError(failure, cause: cause)))
        case .close(let id):
            connections[id.rawValue]?.close()
        case .failAndOpen(let failed, let failure, let id, let waiterID):
            perform(.fail(failed, failure), cause: cause)
            perform(.open(id, for: waiterID))
        case .failAndLease(let failed, let failure, let id, let waiterID):
            perform(.fail(failed, failure), cause: cause)
            perform(.lease(id, to: waiterID))
        case .closeAndOpen(let closed, let id, let waiterID):
            perform(.close(closed))
            perform(.open(id, for: waiterID))
        case .closeAndLease(let closed, let id, let waiterID):
            perform(.close(closed))
            perform(.lease(id, to: waiterID))
        }
    }

    /// Sends `exchange` on `connection`, leased to it; unless its caller gave it up while it waited for one (a
    /// forwarded request whose client's body failed), when the connection is released untouched.
    private func send(
        _ exchange: LoopLocalHTTPClient.Exchange,
        on connection: UpstreamConnectionHandler,
        retryIfStale: Bool,
        completion: @escaping Completion
    ) {
        if let abandonment = exchange.forwarding?.abandonment {
            perform(machine.connectionReleased(connection.id, reusable: connection.isUsable, now: .now()))
            return completion(.failure(abandonment))
        }
        connection.send(exchange, retryIfStale: retryIfStale, completion: completion)
    }

    /// Removes the waiter from ``waiting`` and cancels its timeout.
    private func take(_ waiterID: WaiterID) -> Waiter? {
        guard let waiter = waiting.removeValue(forKey: waiterID) else { return nil }
        waiter.timeout?.cancel()
        return waiter
    }

    private func connect(_ id: ConnectionID, deadline: NIODeadline) {
        let handler = UpstreamConnectionHandler(eventLoop: eventLoop, pool: self, id: id)
        connections[id.rawValue] = handler
        let timeout = min(connectTimeout, deadline - .now())
        let tls = self.tls
        // A loop that cannot carry sockets (an embedded one) fails the connection rather than the process.
        guard let bootstrap = ClientBootstrap(validatingGroup: eventLoop) else {
            connections[id.rawValue] = nil
            return perform(machine.connectFailed(id, now: .now()), cause: ChannelError.operationUnsupported)
        }
        // Over TLS, the request written once the connection is established waits in the TLS handler for the
        // handshake; a handshake that fails fails the exchange (connectionEstablished means the TCP connection).
        bootstrap
            .connectTimeout(max(timeout, .milliseconds(1)))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(tls.makeHandler()) }
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(host: host, port: port)
            .whenComplete { result in
                switch result {
                case .success(let channel):
                    // The handler reports the close as the channel goes inactive; the close future is the
                    // backstop for a channel that never became active.
                    channel.closeFuture.whenComplete { _ in self.connectionClosed(id) }
                    self.perform(self.machine.connectionEstablished(id))
                case .failure(let error):
                    self.connections[id.rawValue] = nil
                    self.perform(self.machine.connectFailed(id, now: .now()), cause: error)
                }
            }
    }

    /// The error a waiter fails with.
    private static func proxyError(_ failure: UpstreamPoolStateMachine.Failure, cause: (any Error)?) -> ProxyError {
        switch failure {
        case .noConnectionInTime:
            return ProxyError(.timeout, "no connection to the backend became free in time")
        case .shuttingDown:
            return ProxyError(.unavailable, "the upstream client is shutting down")
        case .connectFailed:
            return cause.map(proxyError) ?? ProxyError(.network, "cannot reach the backend")
        case .closedWhileConnecting:
            return ProxyError(.network, "the backend closed the connection")
        }
    }

    static func proxyError(_ error: any Error) -> ProxyError {
        if let error = error as? ProxyError { return error }
        if let failure = error as? UpstreamConnectionHandler.Failure {
            switch failure {
            case .timedOut: return ProxyError(.timeout, "the backend did not answer in time")
            case .bodyStalled: return ProxyError(.timeout, "the backend stopped sending its response")
            case .tooLarge(let limit):
                return ProxyError(.upstreamTooLarge, "the backend's response is larger than \(limit) bytes")
            case .overBudget(let limit):
                return ProxyError(
                    .fillBudgetFull,
                    "cache fills already hold what upstream.maxBufferedBytes allows (\(limit) bytes)"
                )
            case .closedBeforeResponse, .closedDuringResponse:
                return ProxyError(.network, "the backend closed the connection")
            case .busy: return ProxyError(.internalError, "an upstream connection was used twice")
            case .abandoned: return ProxyError(.network, "the exchange with the backend was given up")
            case .clientStalled: return ProxyError(.timeout, "the client did not take the response in time")
            case .malformed(let failure): return failure.proxyError
            }
        }
        if case .connectTimeout(_)? = error as? ChannelError {
            return ProxyError(.timeout, "connecting to the backend timed out")
        }
        return ProxyError(
            .network,
            "cannot reach the backend: \(UpstreamFailureReason.reason(for: error))",
            detail: "\(error)"
        )
    }
}
