/// What the public listener speaks, beyond its address: TLS (`listen.tls`) and HTTP/2 (`listen.http2`,
/// `listen.http2Limits`).
///
/// Without `listen.tls` the listener is clear text: HTTP/1.1, and HTTP/2 with prior knowledge (h2c) on the same
/// port, as ingresses and meshes speak it. With it, TLS 1.2 or 1.3, and HTTP/2 or HTTP/1.1 as the client's ALPN
/// asks.
public struct ListenerProtocols: Sendable, Equatable {
    /// The listener's certificate and key; nil for clear text.
    public var tls: TLS?
    /// Whether HTTP/2 is spoken: by ALPN over TLS, by prior knowledge in clear text.
    public var http2 = true
    /// The most streams a client may have open on one HTTP/2 connection (its `SETTINGS_MAX_CONCURRENT_STREAMS`).
    public var maxConcurrentStreams = 100
    /// The largest header list an HTTP/2 request may carry, decoded (`SETTINGS_MAX_HEADER_LIST_SIZE`); a larger
    /// one is refused before it is routed.
    public var maxHeaderListBytes = 16 << 10

    public init() {}

    /// The certificate the listener presents and the key it signs with, re-read when the files change.
    public struct TLS: Sendable, Equatable {
        /// A PEM file: the certificate, then the chain up to (not including) the root.
        public var certificate: String
        /// A PEM file with the certificate's private key.
        public var privateKey: String
        /// The oldest TLS version accepted.
        public var minimumVersion = MinimumVersion.v1_2

        public init(certificate: String, privateKey: String, minimumVersion: MinimumVersion = .v1_2) {
            self.certificate = certificate
            self.privateKey = privateKey
            self.minimumVersion = minimumVersion
        }
    }

    /// The TLS versions a listener may start from.
    public enum MinimumVersion: String, Sendable, Equatable, CaseIterable {
        case v1_2 = "1.2"
        case v1_3 = "1.3"
    }

    /// The bounds of `listen.http2Limits.maxConcurrentStreams`: one stream, up to what no client needs.
    public static let concurrentStreamLimits = 1...10_000

    // MARK: Parsing

    /// The keys of `listen` this type reads.
    static let keys = ["tls", "http2", "http2Limits"]

    /// Reads `listen.tls`, `listen.http2` and `listen.http2Limits`; problems name the key path.
    static func parse(_ listen: ConfigurationSection) throws(ConfigurationError) -> ListenerProtocols {
        var protocols = ListenerProtocols()
        let tls = try listen.section("tls")
        try tls.rejectUnknownKeys(["certificate", "privateKey", "minimumVersion"])
        let certificate = try tls.string("certificate", default: "")
        let privateKey = try tls.string("privateKey", default: "")
        let version = try tls.string("minimumVersion", default: MinimumVersion.v1_2.rawValue)
        guard let minimumVersion = MinimumVersion(rawValue: version) else {
            throw tls.fail("minimumVersion", "\"\(version)\" is not a TLS version the listener takes: 1.2 or 1.3")
        }
        switch (certificate.isEmpty, privateKey.isEmpty) {
        case (true, true):
            if tls.mapping["minimumVersion"] != nil {
                throw tls.fail("minimumVersion", "is set without listen.tls.certificate and listen.tls.privateKey")
            }
        case (false, true):
            throw tls.fail("privateKey", "is not set: a certificate is served with its private key")
        case (true, false):
            throw tls.fail("certificate", "is not set: a private key is served with its certificate")
        case (false, false):
            protocols.tls = TLS(certificate: certificate, privateKey: privateKey, minimumVersion: minimumVersion)
        }
        protocols.http2 = try listen.bool("http2", default: protocols.http2)
        let limits = try listen.section("http2Limits")
        try limits.rejectUnknownKeys(["maxConcurrentStreams", "maxHeaderListBytes"])
        protocols.maxConcurrentStreams = try limits.int(
            "maxConcurrentStreams",
            default: protocols.maxConcurrentStreams,
            in: concurrentStreamLimits
        )
        protocols.maxHeaderListBytes = try limits.byteSize(
            "maxHeaderListBytes",
            default: protocols.maxHeaderListBytes,
            minimum: 1024
        )
        // HPACK sizes are 32-bit (RFC 9113 §6.5.2): nothing larger can be announced.
        guard protocols.maxHeaderListBytes <= Int(UInt32.max) else {
            throw limits.fail("maxHeaderListBytes", "must be at most 4GiB")
        }
        return protocols
    }
}
