import NIOCore

/// The decisions of a pool of connections to the backend, with a limit on how many are open: which request gets
/// which connection, when a new one is opened, who waits and who fails. It does no I/O; its driver reports
/// events and runs the ``Action`` each one returns.
///
/// A connection counts against the limit from the moment it is to be opened until the moment it is reported
/// closed: while it connects, while it is idle or leased, and while it closes. Whatever reports a close, and
/// however often, it is counted out once. When a connection comes free or room opens up, the longest-waiting
/// request with time left, and room in its share, gets it, so a connection is never idle, nor a slot unused, while
/// such a request waits (one whose deadline has passed waits only for its timeout to be reported).
///
/// Forwards (requests passed through to the backend, and uploads streamed as they come) hold at most
/// ``forwardLimit`` connections at once; cache fills may hold all of them. So however many forwards wait, and
/// however long they take, the rest of the pool stays for fills: a fill waits only for other fills. A forward over
/// its share waits, even with a connection idle or room for one, until a forward's connection comes free; a fill is
/// never kept waiting for a forward's sake.
///
/// Identifiers are never reused: an identifier the pool does not know is a connection that closed, or a waiter
/// that is no longer waiting.
public struct UpstreamPoolStateMachine: Sendable {
    /// What a request wants a connection for: it decides which share of the pool it may take.
    public enum Use: Hashable, Sendable {
        /// A cache fill (a miss, a revalidation, a prefetch): any connection of the pool.
        case fill
        /// A request passed through to the backend: only within ``UpstreamPoolStateMachine/forwardLimit``.
        case forward
    }

    /// One connection of the pool.
    public struct ConnectionID: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int
        public init(_ rawValue: Int) { self.rawValue = rawValue }
        public var description: String { "connection \(rawValue)" }
    }

    /// One request for a connection.
    public struct WaiterID: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int
        public init(_ rawValue: Int) { self.rawValue = rawValue }
        public var description: String { "waiter \(rawValue)" }
    }

    /// Where a connection stands.
    public enum ConnectionState: Hashable, Sendable {
        /// Being opened for `waiter`, which gets it once it is established.
        case connecting(for: WaiterID)
        /// Open, and free for the next request.
        case idle
        /// Carrying one request's exchange.
        case leased
        /// Asked to close; it counts until it is reported closed.
        case closing
        /// Closed, or never known: it no longer counts.
        case closed
    }

    /// Why a waiter gets no connection.
    public enum Failure: Hashable, Sendable {
        /// No connection came free before the waiter's deadline.
        case noConnectionInTime
        /// The pool is shut down.
        case shuttingDown
        /// The connection opened for the waiter could not be established.
        case connectFailed
        /// The connection opened for the waiter closed before it was established.
        case closedWhileConnecting
    }

    /// What the driver does after an event.
    public enum Action: Hashable, Sendable {
        /// Nothing.
        case none
        /// Send the waiter's exchange on this connection, open already. A waiter that was parked is parked no
        /// more: its timeout is cancelled.
        case lease(ConnectionID, to: WaiterID)
        /// Open this new connection, and report ``connectionEstablished(_:)`` or ``connectFailed(_:now:)``; it is
        /// the waiter's once established. A waiter that was parked is parked no more.
        case open(ConnectionID, for: WaiterID)
        /// The waiter waits for a connection until its deadline, when the driver reports
        /// ``waiterTimedOut(_:)``.
        case park(WaiterID, until: NIODeadline)
        /// The waiter gets no connection. A waiter that was parked is parked no more.
        case fail(WaiterID, Failure)
        /// Close this connection, and report ``connectionClosed(_:now:)`` when it is.
        case close(ConnectionID)
        /// The first waiter fails, and the room its connection left goes to the second, which was parked: open
        /// the new connection for it.
        case failAndOpen(WaiterID, Failure, open: ConnectionID, for: WaiterID)
        /// The first waiter fails, and its connection having left room in the forwards' share, the idle connection
        /// goes to the second, a parked forward.
        case failAndLease(WaiterID, Failure, lease: ConnectionID, to: WaiterID)
        /// Close the first connection (a forward's, not reusable), and open the second for a parked forward that
        /// the first one's release let back under ``UpstreamPoolStateMachine/forwardLimit``.
        case closeAndOpen(ConnectionID, open: ConnectionID, for: WaiterID)
        /// Close the first connection (a forward's, not reusable), and send a parked forward that its release let
        /// back under ``UpstreamPoolStateMachine/forwardLimit`` on the idle connection.
        case closeAndLease(ConnectionID, lease: ConnectionID, to: WaiterID)
    }

    /// What the driver does when the pool shuts down.
    public struct ShutdownAction: Hashable, Sendable {
        /// Idle connections to close.
        public var close: [ConnectionID] = []
        /// Parked waiters to fail with ``Failure/shuttingDown``.
        public var fail: [WaiterID] = []

        public init(close: [ConnectionID] = [], fail: [WaiterID] = []) {
            self.close = close
            self.fail = fail
        }
    }

    private struct Parked: Hashable, Sendable {
        var waiter: WaiterID
        var deadline: NIODeadline
        var use: Use
    }

    /// The most connections counted at once.
    public let limit: Int
    /// The most connections forwards hold at once: connecting for one, or leased to one.
    public let forwardLimit: Int
    /// A connection that counts: its state, and whether a forward holds it (connecting for one, or leased to one).
    private struct Entry: Sendable {
        var state: ConnectionState
        var holdsForward = false
    }

    /// How many connections forwards hold: kept beside the entries rather than as a set of identifiers, which
    /// cost every forward two more hashes of its connection's identifier.
    private var forwardConnectionCount = 0
    /// The connections that count, by identifier (``IdentifierTable``: each exchange looks its connection up,
    /// and a dictionary hashed the identifier each time): an identifier missing here is closed.
    private var states: IdentifierTable<Entry>
    /// The idle connections, the most recently used last: it is the one taken next, and the least recently
    /// used ones are the ones a backend closes first.
    private var idle: [ConnectionID] = []
    /// The parked waiters, the longest waiting first.
    private var waiters: CircularBuffer<Parked> = []
    private var nextConnection = 0
    private var nextWaiter = 0
    /// Whether ``shutdown()`` happened: no request gets a connection after that, and no connection goes idle.
    public private(set) var isShutDown = false

    /// A pool of at most `limit` connections (at least one, whatever `limit` says), of which forwards hold at most
    /// `forwardLimit` (from one to `limit`; all of them when nil).
    public init(limit: Int, forwardLimit: Int? = nil) {
        self.limit = max(1, limit)
        self.forwardLimit = min(max(1, forwardLimit ?? limit), self.limit)
        idle.reserveCapacity(self.limit)
        states = IdentifierTable(capacity: self.limit)
    }

    /// The connections that count against the limit: connecting, idle, leased or closing.
    public var connectionCount: Int { states.count }

    /// The idle connections, the one taken next last.
    public var idleConnections: [ConnectionID] { idle }

    /// The parked waiters, the longest waiting first.
    public var parkedWaiters: [WaiterID] { waiters.map(\.waiter) }

    /// The parked waiters that are forwards, the longest waiting first.
    public var parkedForwards: [WaiterID] { waiters.filter { $0.use == .forward }.map(\.waiter) }

    /// The connections forwards hold now: connecting for one, or leased to one.
    public var forwardCount: Int { forwardConnectionCount }

    /// Whether a request for `use` may take a connection now, as far as the shares go.
    public func mayTakeConnection(for use: Use) -> Bool {
        use == .fill || forwardConnectionCount < forwardLimit
    }

    /// The deadline `waiter` is parked until, if it is parked.
    public func deadline(of waiter: WaiterID) -> NIODeadline? {
        waiters.first { $0.waiter == waiter }?.deadline
    }

    public func state(of connection: ConnectionID) -> ConnectionState {
        states[connection.rawValue]?.state ?? .closed
    }

    /// A request wants a connection for `use` until `deadline`: an idle one, a new one if there is room, or the
    /// first to come free (the action names the waiter it is, from now on). A forward over its share waits even
    /// when there is a connection for it.
    public mutating func leaseRequested(deadline: NIODeadline, for use: Use = .fill) -> Action {
        let waiter = WaiterID(nextWaiter)
        nextWaiter += 1
        if isShutDown { return .fail(waiter, .shuttingDown) }
        if mayTakeConnection(for: use) {
            if let connection = idle.popLast() {
                states[connection.rawValue] = entry(.leased, for: use)
                return .lease(connection, to: waiter)
            }
            if states.count < limit {
                return .open(newConnection(for: waiter, use: use), for: waiter)
            }
        }
        waiters.append(Parked(waiter: waiter, deadline: deadline, use: use))
        return .park(waiter, until: deadline)
    }

    /// The connection opened for a waiter is established. One the pool no longer counts (it closed meanwhile)
    /// is to be closed; an event about a connection that was not connecting is ignored.
    public mutating func connectionEstablished(_ connection: ConnectionID) -> Action {
        switch states[connection.rawValue]?.state {
        case .connecting(let waiter):
            // A forward's connection stays the forward's.
            states[connection.rawValue]?.state = .leased
            return .lease(connection, to: waiter)
        case nil:
            return .close(connection)
        case .idle, .leased, .closing, .closed:
            return .none
        }
    }

    /// The connection opened for a waiter could not be established: the waiter fails, and the room goes to the
    /// first parked waiter whose deadline is still ahead at `now` (see ``connectionClosed(_:now:)``). An event
    /// about a connection that was not connecting is ignored.
    public mutating func connectFailed(_ connection: ConnectionID, now: NIODeadline = .distantPast) -> Action {
        guard case .connecting(let waiter) = states[connection.rawValue]?.state else { return .none }
        forget(connection)
        return failing(waiter, .connectFailed, now: now)
    }

    /// A leased connection's exchange ended. A reusable one goes to the first parked waiter whose deadline is
    /// still ahead at `now` and whose share has room, or idle; one that is not, or any after shutdown, is to be
    /// closed (it counts until it is closed). An event about a connection that was not leased is ignored.
    ///
    /// A forward's connection released leaves room in the forwards' share: a forward parked for want of it, with
    /// room in the pool for a new connection, gets one opened (the room exists only while no fill waits).
    ///
    /// A waiter whose deadline has passed but whose timeout has not been reported yet is passed over: handed a
    /// connection, its exchange would time out at once and the healthy connection be closed with it. It stays
    /// parked until ``waiterTimedOut(_:)``. The default `now` passes over nobody.
    public mutating func connectionReleased(
        _ connection: ConnectionID,
        reusable: Bool,
        now: NIODeadline = .distantPast
    ) -> Action {
        // Found once and changed where it lies: every exchange ends here, and a second lookup hashed the
        // connection's identifier again.
        guard let slot = states.slot(of: connection.rawValue), states[slot: slot].state == .leased else {
            return .none
        }
        if states[slot: slot].holdsForward { forwardConnectionCount -= 1 }
        guard reusable, !isShutDown else {
            states[slot: slot] = Entry(state: .closing)
            switch serveFirstWaiter(now: now) {
            case .open(let opened, let waiter)?: return .closeAndOpen(connection, open: opened, for: waiter)
            case .lease(let idle, let waiter)?: return .closeAndLease(connection, lease: idle, to: waiter)
            default: return .close(connection)
            }
        }
        if let waiterIndex = firstServableWaiter(now: now) {
            let parked = waiters.remove(at: waiterIndex)
            states[slot: slot] = entry(.leased, for: parked.use)
            return .lease(connection, to: parked.waiter)
        }
        states[slot: slot] = Entry(state: .idle)
        idle.append(connection)
        return .none
    }

    /// The connection closed: it counts no more, and the room goes to the first parked waiter whose deadline is
    /// still ahead at `now`. A connection that was still connecting fails its waiter. Reported more than once, it
    /// is counted out once.
    ///
    /// A waiter whose deadline has passed, its timeout not reported yet, is passed over: a connection opened for
    /// it would have no time left to connect in, and a backend slow enough that requests time out would be sent
    /// a new connection for each. The default `now` passes over nobody.
    public mutating func connectionClosed(_ connection: ConnectionID, now: NIODeadline = .distantPast) -> Action {
        guard let state = forget(connection) else { return .none }
        switch state {
        case .connecting(let waiter):
            return failing(waiter, .closedWhileConnecting, now: now)
        case .idle:
            if let index = idle.firstIndex(of: connection) { idle.remove(at: index) }
        case .leased, .closing, .closed:
            break
        }
        return serveFirstWaiter(now: now) ?? .none
    }

    /// A parked waiter's deadline passed: that waiter, and only that one, fails. One that is not parked any
    /// more (it got a connection, or failed) is left alone.
    public mutating func waiterTimedOut(_ waiter: WaiterID) -> Action {
        guard let index = waiters.firstIndex(where: { $0.waiter == waiter }) else { return .none }
        waiters.remove(at: index)
        return .fail(waiter, .noConnectionInTime)
    }

    /// The pool shuts down: idle connections close, parked waiters fail, and from now on no request gets a
    /// connection and released ones close. Connections being opened still go to their waiters.
    public mutating func shutdown() -> ShutdownAction {
        isShutDown = true
        var action = ShutdownAction()
        action.close = idle
        for connection in idle { states[connection.rawValue]?.state = .closing }
        idle.removeAll()
        action.fail = waiters.map(\.waiter)
        waiters.removeAll()
        return action
    }

    private mutating func newConnection(for waiter: WaiterID, use: Use) -> ConnectionID {
        let connection = ConnectionID(nextConnection)
        nextConnection += 1
        states[connection.rawValue] = entry(.connecting(for: waiter), for: use)
        return connection
    }

    /// A connection's entry in `state` for a request of `use`, counted in the forwards' share when it is a
    /// forward's: every entry that holds a forward is made here, and left through ``forget(_:)`` or a release.
    private mutating func entry(_ state: ConnectionState, for use: Use) -> Entry {
        let holdsForward = use == .forward
        if holdsForward { forwardConnectionCount += 1 }
        return Entry(state: state, holdsForward: holdsForward)
    }

    /// The connection counts no more; its state before, nil when it did not count.
    @discardableResult
    private mutating func forget(_ connection: ConnectionID) -> ConnectionState? {
        guard let entry = states.remove(connection.rawValue) else { return nil }
        if entry.holdsForward { forwardConnectionCount -= 1 }
        return entry.state
    }

    /// The first parked waiter whose deadline is still ahead at `now` and whose share has room.
    private func firstServableWaiter(now: NIODeadline) -> CircularBuffer<Parked>.Index? {
        let forwardsMayTake = forwardConnectionCount < forwardLimit
        return waiters.firstIndex { $0.deadline > now && ($0.use == .fill || forwardsMayTake) }
    }

    /// `waiter` fails, its connection having left room for the first parked waiter with time left at `now`.
    private mutating func failing(_ waiter: WaiterID, _ failure: Failure, now: NIODeadline) -> Action {
        switch serveFirstWaiter(now: now) {
        case .open(let connection, let next)?: return .failAndOpen(waiter, failure, open: connection, for: next)
        case .lease(let connection, let next)?: return .failAndLease(waiter, failure, lease: connection, to: next)
        default: return .fail(waiter, failure)
        }
    }

    /// The first parked waiter with time left at `now` and room in its share gets an idle connection, or a new one
    /// when there is room: after a connection left the pool, or a forward's left the forwards' share. (An idle
    /// connection can be there only for a forward: a fill would have taken it.) Nil when nobody can be served.
    private mutating func serveFirstWaiter(now: NIODeadline) -> Action? {
        guard !isShutDown, let index = firstServableWaiter(now: now) else { return nil }
        guard let connection = idle.last else {
            guard states.count < limit else { return nil }
            let parked = waiters.remove(at: index)
            return .open(newConnection(for: parked.waiter, use: parked.use), for: parked.waiter)
        }
        idle.removeLast()
        let parked = waiters.remove(at: index)
        states[connection.rawValue] = entry(.leased, for: parked.use)
        return .lease(connection, to: parked.waiter)
    }
}
