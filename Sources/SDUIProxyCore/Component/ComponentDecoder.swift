import NIOCore

/// Decodes and validates backend responses as Beagle components (the seed's `Coder`).
///
/// A component is a JSON document whose root is an object with a non-empty string `_beagleComponent_`.
/// What the component type means is the client's business: the proxy checks that it is a component at all,
/// so a broken or truncated backend answer is never cached and never reaches clients as a screen.
public struct ComponentDecoder: Sendable {
    /// The key that names a component's type.
    public static let componentTypeKey = "_beagleComponent_"

    public struct Failure: Error, Equatable, Sendable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
    }

    public init() {}

    /// Whether a response with this `Content-Type` is JSON (`application/json` or any `+json` type).
    public static func isJSON(contentType: String?) -> Bool {
        guard let contentType else { return false }
        return contentType.withContiguousUTF8 { isJSON(contentType: UnsafeRawBufferPointer($0)) }
    }

    /// ``isJSON(contentType:)`` for a value read in place: this runs for every backend answer.
    public static func isJSON(contentType bytes: UnsafeRawBufferPointer) -> Bool {
        let parameters = ByteSearch.firstIndex(of: UInt8(ascii: ";"), in: bytes) ?? bytes.endIndex
        let mediaType = HTTPSyntax.trimmingOptionalWhitespace(bytes[..<parameters])
        let type: StaticString = "application/"
        let suffix: StaticString = "+json"
        guard mediaType.count > type.utf8CodeUnitCount,
            HTTPSyntax.equalsIgnoringCase(bytes: mediaType.prefix(type.utf8CodeUnitCount), type)
        else { return false }
        let subtype = mediaType.dropFirst(type.utf8CodeUnitCount)
        return HTTPSyntax.equalsIgnoringCase(bytes: subtype, "json")
            || HTTPSyntax.equalsIgnoringCase(bytes: subtype.suffix(suffix.utf8CodeUnitCount), suffix)
    }

    /// Checks that `body` is a component, like ``validateComponent(_:)``, and plans its prefetches in the same
    /// pass over its bytes (``PrefetchPlanner/plan(forComponent:)-(ByteBuffer)`` would be a second).
    public func validateComponent(
        _ body: ByteBuffer,
        planningWith planner: PrefetchPlanner
    ) throws(Failure)
        -> PrefetchPlanner.Plan
    {
        var storage = JSONScanStorage()
        return try validateComponent(body, planningWith: planner, reusing: &storage)
    }

    /// ``validateComponent(_:planningWith:)`` with the scan's arrays lent by `storage` and taken back after, so
    /// that a caller that keeps one between components allocates none for them (``JSONScanStorage``).
    public func validateComponent(
        _ body: ByteBuffer,
        planningWith planner: PrefetchPlanner,
        reusing storage: inout JSONScanStorage
    ) throws(Failure)
        -> PrefetchPlanner.Plan
    {
        try body.withUnsafeReadableBytes { bytes throws(Failure) in
            let scan: JSONParser.Scan
            do throws(JSONParser.Failure) {
                scan = try PrefetchPlanner.scan(bytes, rootMember: Self.componentTypeKey, storage: &storage)
            } catch {
                throw Self.invalidJSON(error)
            }
            guard scan.rootHasMember else {
                storage.reclaim(consume scan)
                throw Self.notAComponent
            }
            // Planned while the bytes are at hand: the scan says where the actions' strings lie in them.
            let plan = planner.plan(for: scan, in: bytes, resolved: &storage.resolvedURLs)
            storage.reclaim(consume scan)
            return plan
        }
    }

    private static func invalidJSON(_ error: JSONParser.Failure) -> Failure {
        Failure(reason: "the backend's response is not valid JSON (\(error.reason) at byte \(error.offset))")
    }

    private static let notAComponent = Failure(
        reason: "the backend's JSON is not a component: its root needs a non-empty string \(componentTypeKey)"
    )

    /// Checks that `body` is a component: valid JSON whose root is an object with a non-empty string
    /// ``componentTypeKey``. Nothing of it is built.
    public func validateComponent(_ body: ByteBuffer) throws(Failure) {
        let isComponent: Bool
        do {
            isComponent = try body.withUnsafeReadableBytes { bytes throws(JSONParser.Failure) in
                try JSONParser.validateObject(bytes, requiringStringMember: Self.componentTypeKey)
            }
        } catch {
            throw Self.invalidJSON(error)
        }
        guard isComponent else { throw Self.notAComponent }
    }
}
