/// Compressing stored responses (config key `compression`): the codings a response is also stored in, besides
/// its identity form, and which responses are worth it.
///
/// Each form is made once, when a client first asks for it (or, with ``eager``, when the response is stored), and
/// served to the clients whose `Accept-Encoding` takes it. A reload applies to responses stored after it: entries
/// stored before keep the forms they were stored with until they are replaced or purged.
public struct CompressionConfiguration: Sendable, Equatable {
    /// The codings each stored response is also kept in; empty turns compression off. Only the codings in
    /// ``ContentCoding/stored`` are accepted, each once.
    public var encodings: [ContentCoding] = ContentCoding.stored
    /// Bodies smaller than this are stored only as they are: compressing a few hundred bytes saves less than a
    /// second stored copy costs.
    public var minBytes = 256
    /// The media types that are compressed (see ``compresses(contentType:)``): `type/subtype` for one type,
    /// `type/` for every subtype of a type, `+suffix` for a structured syntax suffix (RFC 6838 section 4.2.8).
    /// Images other than SVG, fonts and archives are compressed already, and are left out.
    public var types = CompressionConfiguration.defaultTypes {
        didSet { typePatterns = types.map(TypePattern.init) }
    }
    /// ``types`` as every fill compares a response's type with them, made when they are set: read through each
    /// entry's `String` (its length, its first and last bytes, its bytes), they cost a fill about 570
    /// instructions.
    private var typePatterns = CompressionConfiguration.defaultTypes.map(TypePattern.init)
    private static let defaultTypes = ["application/json", "+json", "text/", "application/javascript", "image/svg+xml"]
    /// The gzip level, 1 (fastest) to 9 (smallest).
    public var gzipLevel = 6
    /// The brotli quality, 0 (fastest) to 11 (smallest). Past 5 or so brotli gets much slower for a few percent;
    /// a response is compressed once, but while a fill waits for it.
    public var brotliLevel = 5
    /// Whether every stored response is compressed in every coding of ``encodings`` when it is stored. Off (the
    /// default), a response is compressed in a coding when a client that would be sent that coding first asks for
    /// it: the client whose miss stored it, or a later hit (answered in what is kept, the next ones in the coding).
    /// A coding no client of a response asks for is never made: with both codings listed, a fleet of clients that
    /// all take brotli costs each fill a brotli encoding, not also a gzip one, and a client that takes no coding
    /// costs none. Prefetched and warmed responses, which no client has asked for yet, are compressed in every
    /// coding either way.
    public var eager = false

    /// The gzip levels the config accepts: zlib's, but for 0, which stores without compressing.
    public static let gzipLevels = 1...9
    /// The brotli qualities the config accepts: all of brotli's.
    public static let brotliLevels = 0...11

    /// The defaults: br and gzip, for JSON, text, JavaScript and SVG of 256 bytes or more.
    public init() {}

    /// Whether any response is compressed.
    public var isEnabled: Bool { !encodings.isEmpty }

    /// The level a response is stored in `coding` at; `deflate`, which is never stored, takes gzip's.
    public func level(for coding: ContentCoding) -> Int {
        switch coding {
        case .br: brotliLevel
        case .gzip, .deflate: gzipLevel
        }
    }

    /// Whether a response of this `Content-Type` is compressed: its media type (parameters and surrounding
    /// whitespace aside, without regard to case) is one of ``types``, starts with one that ends in `/`, or has a
    /// subtype that ends with one that starts with `+`. A response without a `Content-Type` is not compressed:
    /// what it is would be a guess.
    public func compresses(contentType: String?) -> Bool {
        guard var contentType else { return false }
        return contentType.withUTF8 { compresses(contentType: UnsafeRawBufferPointer($0)) }
    }

    /// ``compresses(contentType:)`` for a `Content-Type` value where it lies: every fill asks, so the value is
    /// read in place, neither copied nor lower-cased.
    public func compresses(contentType value: UnsafeRawBufferPointer) -> Bool {
        let parametersStart = ByteSearch.firstIndex(of: UInt8(ascii: ";"), in: value) ?? value.count
        let mediaType = UnsafeRawBufferPointer(
            rebasing: HTTPSyntax.trimmingOptionalWhitespace(value[..<parametersStart])
        )
        guard let slash = ByteSearch.firstIndex(of: UInt8(ascii: "/"), in: mediaType), slash > 0,
            slash < mediaType.count - 1
        else {
            return false
        }
        let subtypeCount = mediaType.count - slash - 1
        for pattern in typePatterns where pattern.matches(mediaType, subtypeCount: subtypeCount) { return true }
        return false
    }

    /// One entry of ``types``: the bytes a media type is compared with, and which part of it they are.
    private struct TypePattern: Sendable, Equatable {
        enum Part: Sendable, Equatable {
            /// `type/subtype`: the whole media type.
            case whole
            /// `type/`: its start.
            case type
            /// `+suffix`: the end of its subtype, which is longer.
            case suffix
        }

        let part: Part
        let bytes: [UInt8]

        init(_ entry: String) {
            bytes = Array(entry.utf8)
            part =
                bytes.first == UInt8(ascii: "+") ? .suffix : bytes.last == UInt8(ascii: "/") ? .type : .whole
        }

        /// Whether `mediaType`, whose subtype is `subtypeCount` bytes long, is of this pattern, ignoring case.
        func matches(_ mediaType: UnsafeRawBufferPointer, subtypeCount: Int) -> Bool {
            bytes.withUnsafeBytes { pattern in
                let compared: UnsafeRawBufferPointer
                switch part {
                case .whole:
                    compared = mediaType
                case .type:
                    guard mediaType.count >= pattern.count else { return false }
                    compared = UnsafeRawBufferPointer(rebasing: mediaType[..<pattern.count])
                case .suffix:
                    guard subtypeCount > pattern.count else { return false }
                    compared = UnsafeRawBufferPointer(rebasing: mediaType[(mediaType.count - pattern.count)...])
                }
                return HTTPSyntax.sameIgnoringCase(bytes: compared, pattern)
            }
        }
    }

    // MARK: Parsing

    /// Reads the `compression` section; every key has a default, and problems name the key path.
    static func parse(_ section: ConfigurationSection) throws(ConfigurationError) -> CompressionConfiguration {
        try section.rejectUnknownKeys(["encodings", "minBytes", "types", "level", "eager"])
        var compression = CompressionConfiguration()
        let names = try section.commaSeparatedList("encodings", default: compression.encodings.map(\.rawValue))
        compression.encodings = []
        for name in names {
            guard let coding = ContentCoding(rawValue: name.lowercased()), ContentCoding.stored.contains(coding) else {
                let stored = ContentCoding.stored.map(\.rawValue).joined(separator: ", ")
                let why =
                    name.lowercased() == ContentCoding.deflate.rawValue ? " (deflate is decoded, never stored)" : ""
                throw section.fail("encodings", "\"\(name)\" is not a coding responses are stored in: \(stored)\(why)")
            }
            guard !compression.encodings.contains(coding) else {
                throw section.fail("encodings", "\(coding) is listed twice")
            }
            compression.encodings.append(coding)
        }
        compression.minBytes = try section.byteSize("minBytes", default: compression.minBytes)
        compression.types = try section.commaSeparatedList("types", default: compression.types).map {
            $0.lowercased()
        }
        for entry in compression.types where !isTypePattern(entry) {
            throw section.fail(
                "types",
                "\"\(entry)\" is not a media type (application/json), a type with every subtype (text/) or a suffix (+json)"
            )
        }
        let level = try section.section("level")
        try level.rejectUnknownKeys(["gzip", "br"])
        compression.gzipLevel = try level.int("gzip", default: compression.gzipLevel, in: gzipLevels)
        compression.brotliLevel = try level.int("br", default: compression.brotliLevel, in: brotliLevels)
        compression.eager = try section.bool("eager", default: compression.eager)
        return compression
    }

    /// `type/subtype`, `type/` or `+suffix`, each part a token.
    private static func isTypePattern(_ entry: String) -> Bool {
        if entry.hasPrefix("+") {
            let suffix = entry.dropFirst()
            return HTTPSyntax.isToken(suffix) && !suffix.contains("/")
        }
        let parts = entry.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, HTTPSyntax.isToken(parts[0]), !parts[1].contains("/") else { return false }
        return parts[1].isEmpty || HTTPSyntax.isToken(parts[1])
    }
}
