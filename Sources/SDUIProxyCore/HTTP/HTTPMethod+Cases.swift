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

    /// Safe (RFC 9110 section 9.2.1): the method changes nothing at the origin.
    public var isSafe: Bool {
        switch self {
        case .GET, .HEAD, .OPTIONS, .TRACE: return true
        default: return false
        }
    }

    /// Idempotent (RFC 9110 section 9.2.2): sending it twice has the effect of sending it once.
    public var isIdempotent: Bool {
        switch self {
        case .GET, .HEAD, .OPTIONS, .TRACE, .PUT, .DELETE: return true
        default: return false
        }
    }
}
