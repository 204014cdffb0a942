/// What makes a queue route's writes creates (`queue.routes[].creates`): where a write names the local identifier
/// of the entity it creates, and where the backend's 2xx answer names its own.
public struct CreateRule: Sendable, Equatable {
    /// Where an identifier is read.
    public enum Source: Sendable, Equatable {
        /// A header's whole value (`X-Local-Id`).
        case header(String)
        /// A JSON Pointer into the body (`/localId`, `/id`).
        case json(JSONPointer)
        /// The part of a header's value that `{id}` stands for in `pattern` (`Location`, `/api/orders/{id}`); the
        /// rest of the value must be the pattern's text exactly (an absolute URL's scheme and host aside).
        case headerPattern(String, pattern: String)
    }

    public var localId: Source
    public var remoteId: Source

    public init(localId: Source, remoteId: Source) {
        self.localId = localId
        self.remoteId = remoteId
    }

    /// Why a create's local identifier cannot be taken: the 400's reason.
    public struct Refusal: Error, Equatable, Sendable {
        public var reason: String

        public init(reason: String) {
            self.reason = reason
        }
    }

    /// The local identifier a create's request names, from `header` (a name's value, nil when absent) and its JSON
    /// `body`. A create that names none, or not a sane token, is refused with words its client can act on.
    public func localIdentifier(
        header: (String) -> String?,
        body: [UInt8]
    ) -> Result<LocalIdentifier, Refusal> {
        let text: String
        switch localId {
        case .header(let name):
            guard let value = header(name) else {
                return .failure(Refusal(reason: "a create needs its local identifier in \(name)"))
            }
            text = value
        case .json(let pointer):
            guard case .string(let value)? = pointer.scalar(in: body) else {
                return .failure(
                    Refusal(reason: "a create needs its local identifier as a JSON string at \(pointer.description)")
                )
            }
            text = value
        case .headerPattern(let name, let pattern):
            guard let value = header(name), let id = Self.identifier(in: value, pattern: pattern) else {
                return .failure(Refusal(reason: "a create needs its local identifier in \(name) as \(pattern)"))
            }
            text = id
        }
        guard let identifier = LocalIdentifier(text) else {
            return .failure(Refusal(reason: LocalIdentifier.refusal(of: text)))
        }
        return .success(identifier)
    }

    /// The backend's identifier in a create's 2xx answer, from `header` and its `body`; nil when it has none that
    /// can stand in a path and a JSON body (a sane token, or a JSON integer).
    public func remoteIdentifier(header: (String) -> String?, body: [UInt8]) -> RemoteIdentifier? {
        switch remoteId {
        case .header(let name):
            return header(name).flatMap { RemoteIdentifier($0) }
        case .json(let pointer):
            switch pointer.scalar(in: body) {
            case .string(let text)?: return RemoteIdentifier(text)
            case .number(let text)?: return RemoteIdentifier(text, isNumber: true)
            case nil: return nil
            }
        case .headerPattern(let name, let pattern):
            return header(name).flatMap { Self.identifier(in: $0, pattern: pattern) }.flatMap { RemoteIdentifier($0) }
        }
    }

    /// What `{id}` stands for in `value` matched against `pattern`. An absolute URL's scheme and authority are set
    /// aside first (a `Location` may be absolute), and so is a query after the pattern's path.
    static func identifier(in value: String, pattern: String) -> String? {
        guard let placeholder = pattern.firstRange(of: "{id}") else { return nil }
        var value = Substring(value)
        if pattern.hasPrefix("/"), let scheme = value.firstRange(of: "://") {
            let afterScheme = value[scheme.upperBound...]
            value = afterScheme.firstIndex(of: "/").map { afterScheme[$0...] } ?? ""
        }
        if !pattern.contains("?"), let query = value.firstIndex(of: "?") { value = value[..<query] }
        let prefix = pattern[..<placeholder.lowerBound]
        let suffix = pattern[placeholder.upperBound...]
        guard value.hasPrefix(prefix), value.hasSuffix(suffix), value.count >= prefix.count + suffix.count else {
            return nil
        }
        let id = value.dropFirst(prefix.count).dropLast(suffix.count)
        return id.isEmpty ? nil : String(id)
    }
}
