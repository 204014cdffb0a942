import Logging
import NIOCore
import NIOExtras
import NIOPosix
import SDUIProxyCore
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One of the proxy's listeners (public or admin) as a `Service`.
///
/// `run()` binds the address and reports the bound port through ``listening``; a bind that fails (a port in
/// use) throws a ``ProxyStartupError`` naming the address, which ends the proxy's service group. On graceful
/// shutdown the listener stops accepting, lets the connections it has finish what they are doing (each is told
/// to quiesce) until the ``DrainDeadline``, then closes those still open. When the group is cancelled instead
/// (another service failed), it closes everything at once.
final class ListenerService: Service, Sendable, CustomStringConvertible {
    enum Role: String, Sendable {
        case `public`
        case admin
    }

    let role: Role
    let address: ProxyConfiguration.ListenAddress
    /// The bound port once the listener accepts connections, or why it could not bind.
    let listening = StartupSignal<Int>()
    private let eventLoopGroup: any EventLoopGroup
    private let limiter: ConnectionLimiter
    private let drainDeadline: DrainDeadline
    private let logger: Logger
    private let childInitializer: @Sendable (any Channel) -> EventLoopFuture<Void>
    private let channel = Mutex<(any Channel)?>(nil)

    init(
        role: Role,
        address: ProxyConfiguration.ListenAddress,
        eventLoopGroup: any EventLoopGroup,
        limiter: ConnectionLimiter,
        drainDeadline: DrainDeadline,
        logger: Logger,
        childInitializer: @escaping @Sendable (any Channel) -> EventLoopFuture<Void>
    ) {
        self.role = role
        self.address = address
        self.eventLoopGroup = eventLoopGroup
        self.limiter = limiter
        self.drainDeadline = drainDeadline
        self.logger = logger
        self.childInitializer = childInitializer
    }

    /// What the service group logs: the role and address, nothing the connections are given.
    var description: String { "ListenerService(\(role.rawValue), \(address.host):\(address.port))" }

    /// Whether the listener accepts connections (false before it has bound and once its shutdown has begun).
    var isAcceptingConnections: Bool { channel.withLock { $0 }?.isActive ?? false }

    func run() async throws {
        let quiescing = ServerQuiescingHelper(group: eventLoopGroup)
        let channel: any Channel
        do {
            channel = try await bind(quiescing: quiescing)
        } catch {
            listening.fail(error)
            throw error
        }
        self.channel.withLock { $0 = channel }
        listening.succeed(channel.localAddress?.port ?? 0)

        // Graceful shutdown drains; a cancellation (another service failed) leaves no time to.
        let graceful = (try? await gracefulShutdown()) != nil
        if graceful { logger.info("draining connections", metadata: ["listener": "\(role.rawValue)"]) }
        let deadline = graceful ? drainDeadline.deadline() : .now()
        if await !drain(quiescing, until: deadline) {
            if graceful {
                logger.warning(
                    "drain deadline reached, closing the remaining connections",
                    metadata: ["listener": "\(role.rawValue)", "open": "\(limiter.openConnections)"]
                )
            }
            try? await channel.close()
            limiter.closeAll()
        }
        // The helper is let go of here, while the loops run: its deinit completes a promise on one.
    }

    /// Stops accepting and tells the connections to quiesce; returns whether all closed before `deadline`.
    private func drain(_ quiescing: ServerQuiescingHelper, until deadline: NIODeadline) async -> Bool {
        let eventLoop = eventLoopGroup.any()
        let drained = eventLoop.makePromise(of: Void.self)
        quiescing.initiateShutdown(promise: drained)
        // Whichever comes first: every connection closed, or the deadline.
        let outcome = eventLoop.makePromise(of: Bool.self)
        let decided = Atomic(false)
        let decide: @Sendable (Bool) -> Void = { drainedInTime in
            if decided.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
                outcome.succeed(drainedInTime)
            }
        }
        drained.futureResult.whenComplete { _ in decide(true) }
        let timer = eventLoop.scheduleTask(deadline: deadline) { decide(false) }
        let drainedInTime = (try? await outcome.futureResult.get()) ?? false
        if drainedInTime { timer.cancel() }
        return drainedInTime
    }

    private func bind(quiescing: ServerQuiescingHelper) async throws -> any Channel {
        let bootstrap = ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiescing.makeServerChannelHandler(channel: channel))
                }
            }
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            .childChannelInitializer(childInitializer)
        do {
            return try await bootstrap.bind(host: address.host, port: address.port).get()
        } catch {
            throw ProxyStartupError(
                message: "cannot listen on \(address.host):\(address.port): \(Self.reason(forBindError: error))"
            )
        }
    }

    /// Why a bind failed, in the words of the system's error (`address already in use`), without the library's
    /// call names and numbers: an operator reads this line, the log has nothing more to say about it.
    static func reason(forBindError error: any Error) -> String {
        if let error = error as? IOError {
            switch error.errnoCode {
            case EADDRINUSE: return "address already in use"
            case EACCES: return "permission denied (a port below 1024 needs privileges)"
            case EADDRNOTAVAIL: return "this machine has no such address"
            default:
                guard let text = strerror(error.errnoCode) else { return "error \(error.errnoCode)" }
                return String(cString: text).lowercased()
            }
        }
        if error is SocketAddressError { return "the host does not resolve to an address" }
        return "\(error)"
    }
}

/// When the listeners' drain ends: fixed by the first listener that begins to drain, so that draining both
/// one after the other takes no longer than the drain timeout, as when they drained together.
final class DrainDeadline: Sendable {
    private let state: Mutex<(timeout: TimeAmount, deadline: NIODeadline?)>

    init(timeout: TimeAmount) {
        state = Mutex((timeout, nil))
    }

    /// Sets the timeout, unless a drain has already begun.
    func setTimeout(_ timeout: TimeAmount) {
        state.withLock { if $0.deadline == nil { $0.timeout = timeout } }
    }

    /// The deadline: the drain timeout from the first call.
    func deadline() -> NIODeadline {
        state.withLock { state in
            if let deadline = state.deadline { return deadline }
            let deadline = NIODeadline.now() + state.timeout
            state.deadline = deadline
            return deadline
        }
    }
}

/// A value one task reports once and others wait for: a listener's port, or why it has none.
final class StartupSignal<Value: Sendable>: Sendable {
    private let state = Mutex<(result: Result<Value, any Error>?, waiters: [CheckedContinuation<Value, any Error>])>(
        (nil, [])
    )

    func succeed(_ value: Value) { complete(.success(value)) }

    func fail(_ error: any Error) { complete(.failure(error)) }

    /// The first result counts; later ones are ignored.
    private func complete(_ result: Result<Value, any Error>) {
        let waiters = state.withLock { state -> [CheckedContinuation<Value, any Error>] in
            guard state.result == nil else { return [] }
            state.result = result
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(with: result) }
    }

    /// The value once reported; throws what was reported instead.
    var value: Value {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                let result = state.withLock { state -> Result<Value, any Error>? in
                    if let result = state.result { return result }
                    state.waiters.append(continuation)
                    return nil
                }
                if let result { continuation.resume(with: result) }
            }
        }
    }

    /// The value if it has been reported.
    var reported: Value? { state.withLock { try? $0.result?.get() } }
}
