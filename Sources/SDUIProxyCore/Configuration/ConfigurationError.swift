/// A configuration that cannot be used: it names the key and says what is wrong, in one line.
public struct ConfigurationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The dotted key path (`cache.maxBytes`), or the file path when the file itself is the problem.
    public var key: String
    /// What is wrong with it.
    public var problem: String

    public init(key: String, problem: String) {
        self.key = key
        self.problem = problem
    }

    public var description: String { "config error: \(key): \(problem)" }
}
