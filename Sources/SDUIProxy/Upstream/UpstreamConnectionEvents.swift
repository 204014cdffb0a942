import SDUIProxyCore

/// What an upstream connection tells the pool it belongs to: the end of each exchange it was sent, and its own
/// close. The pool owns these events; the connection only reports them, to a pool it does not keep alive.
protocol UpstreamConnectionEvents: AnyObject {
    /// The exchange `connection` was sent has ended with `result`; `retryIfStale` when it may go once more on
    /// another connection (nothing of an answer came). `completion` is the exchange's caller's, to pass it on.
    func exchangeEnded(
        _ result: Result<UpstreamResponse, any Error>,
        on connection: UpstreamConnectionHandler,
        _ exchange: LoopLocalHTTPClient.Exchange,
        retryIfStale: Bool,
        _ completion: @escaping PoolState.Completion
    )

    /// The connection `id` closed.
    func connectionClosed(_ id: UpstreamPoolStateMachine.ConnectionID)
}
