import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A block of IPv4 or IPv6 addresses in CIDR notation: `10.0.0.0/8`, `2001:db8::/32`, or one address
/// (`127.0.0.1`, `::1`).
///
/// `listen.trustedProxies` lists them: a client connection from inside one is a proxy or load balancer whose
/// forwarding headers are kept and appended to.
public struct IPAddressRange: Sendable, Hashable, CustomStringConvertible {
    /// The network's address bytes (4 or 16), with the bits past the prefix cleared.
    private let network: [UInt8]
    /// How many leading bits an address must share with ``network``.
    public let prefixLength: Int

    /// Parses `address` or `address/prefix`; nil when it is neither.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let bytes = Self.parseAddress(String(parts[0])) else { return nil }
        let bits = bytes.count * 8
        var prefix = bits
        if parts.count == 2 {
            guard !parts[1].isEmpty, parts[1].allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(parts[1]),
                value <= bits
            else { return nil }
            prefix = value
        }
        self.prefixLength = prefix
        self.network = Self.masked(bytes, prefix: prefix)
    }

    /// Whether `address` (4 or 16 bytes, as ``bytes(of:)`` gives) is inside this block. An IPv4 address never
    /// matches an IPv6 block or the other way round; ``bytes(of:)`` has already turned IPv4-mapped IPv6 addresses
    /// into IPv4 ones.
    public func contains(_ address: [UInt8]) -> Bool {
        address.count == network.count && Self.masked(address, prefix: prefixLength) == network
    }

    /// The address bytes of a socket address: 4 for IPv4 (and IPv4-mapped IPv6, `::ffff:a.b.c.d`), 16 for IPv6;
    /// nil for a Unix socket.
    public static func bytes(of address: SocketAddress) -> [UInt8]? {
        switch address {
        case .v4(let v4):
            return withUnsafeBytes(of: v4.address.sin_addr) { Array($0) }
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            let mappedPrefix: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]
            return bytes.starts(with: mappedPrefix) ? Array(bytes[12...]) : bytes
        case .unixDomainSocket:
            return nil
        }
    }

    /// The address bytes of `text`, an IPv4 or IPv6 address; nil when it is not one.
    public static func parseAddress(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
    }

    public var description: String {
        let family = network.count == 4 ? AF_INET : AF_INET6
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let address = network.withUnsafeBytes { bytes in
            inet_ntop(family, bytes.baseAddress, &text, socklen_t(text.count)) != nil
                ? String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        }
        return prefixLength == network.count * 8 ? address : "\(address)/\(prefixLength)"
    }

    private static func masked(_ bytes: [UInt8], prefix: Int) -> [UInt8] {
        var result = bytes
        for index in result.indices {
            let bitsHere = max(0, min(8, prefix - index * 8))
            result[index] &= bitsHere == 8 ? 0xFF : ~(0xFF >> UInt8(bitsHere))
        }
        return result
    }
}
