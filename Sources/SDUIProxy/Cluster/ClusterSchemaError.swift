/// The shared database's schema cannot be used by this binary.
public struct ClusterSchemaError: Error, Equatable, Sendable, CustomStringConvertible {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}
