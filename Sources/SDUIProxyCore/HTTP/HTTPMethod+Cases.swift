import NIOHTTP1

// Methods told apart by their case. `HTTPMethod` is both `Equatable` and `RawRepresentable`, and `==` between two
// of them resolves to the standard library's `RawRepresentable` overload, which builds both raw strings to
// compare them: two calls of `rawValue` for every `method.isGET` on every request. A pattern compares the case.
extension HTTPMethod {
    /// `GET`.
    public var isGET: Bool {
        if case .GET = self { return true }
        return false
    }

    /// `HEAD`.
    public var isHEAD: Bool {
        if case .HEAD = self { return true }
        return false
    }

    /// `GET` or `HEAD`: the methods a cache answers.
    public var isGETOrHEAD: Bool {
        switch self {
        case .GET, .HEAD: return true
        default: return false
        }
    }

    /// `CONNECT`.
    public var isCONNECT: Bool {
        if case .CONNECT = self { return true }
        return false
    }
}
