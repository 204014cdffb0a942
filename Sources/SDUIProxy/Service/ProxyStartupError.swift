/// The proxy could not start (a port in use, a missing directory, ...): its message is one line for the operator.
public struct ProxyStartupError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
