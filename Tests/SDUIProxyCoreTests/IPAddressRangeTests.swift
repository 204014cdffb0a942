import NIOCore
import SDUIProxyCore
import Testing

@Suite("IP address ranges for trusted proxies")
struct IPAddressRangeTests {
    private func bytes(_ text: String) throws -> [UInt8] {
        try #require(IPAddressRange.parseAddress(text))
    }

    @Test("CIDR blocks and single addresses, IPv4 and IPv6")
    func containment() throws {
        let private10 = try #require(IPAddressRange("10.0.0.0/8"))
        #expect(private10.contains(try bytes("10.200.3.4")))
        #expect(!private10.contains(try bytes("11.0.0.1")))
        let one = try #require(IPAddressRange("127.0.0.1"))
        #expect(one.contains(try bytes("127.0.0.1")))
        #expect(!one.contains(try bytes("127.0.0.2")))
        let odd = try #require(IPAddressRange("192.168.1.128/25"))
        #expect(odd.contains(try bytes("192.168.1.200")))
        #expect(!odd.contains(try bytes("192.168.1.100")))
        let v6 = try #require(IPAddressRange("2001:db8::/32"))
        #expect(v6.contains(try bytes("2001:db8:1::5")))
        #expect(!v6.contains(try bytes("2001:db9::5")))
        #expect(!v6.contains(try bytes("10.0.0.1")))
        let everything = try #require(IPAddressRange("0.0.0.0/0"))
        #expect(everything.contains(try bytes("203.0.113.9")))
    }

    @Test(
        "descriptions are normalised",
        arguments: [("10.1.2.3/8", "10.0.0.0/8"), ("::1", "::1"), ("2001:DB8::/32", "2001:db8::/32")]
    )
    func description(text: String, expected: String) throws {
        #expect(try #require(IPAddressRange(text)).description == expected)
    }

    @Test(
        "malformed ranges are refused",
        arguments: [
            "", "10.0.0.0/33", "::/129", "10.0.0/8", "10.0.0.0/", "10.0.0.0/-1", "host.example", "10.0.0.0/8/8",
        ]
    )
    func malformed(text: String) {
        #expect(IPAddressRange(text) == nil)
    }

    @Test("socket addresses, IPv4-mapped IPv6 as IPv4")
    func socketAddresses() throws {
        let v4 = try SocketAddress(ipAddress: "10.1.2.3", port: 80)
        #expect(IPAddressRange.bytes(of: v4) == [10, 1, 2, 3])
        let mapped = try SocketAddress(ipAddress: "::ffff:10.1.2.3", port: 80)
        #expect(IPAddressRange.bytes(of: mapped) == [10, 1, 2, 3])
        let v6 = try SocketAddress(ipAddress: "::1", port: 80)
        #expect(IPAddressRange.bytes(of: v6)?.count == 16)
    }
}
