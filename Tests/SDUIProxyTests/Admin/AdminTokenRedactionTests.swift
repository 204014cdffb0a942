import Foundation
import Logging
import NIOCore
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The forms in which a token could leak into text: itself, its bytes as Swift prints an array, and its base64
/// and hex encodings.
enum TokenForms {
    static func all(of token: String) -> [String] {
        let bytes = Array(token.utf8)
        return [
            token,
            "\(bytes)",
            bytes.map(String.init).joined(separator: ","),
            Data(bytes).base64EncodedString(),
            bytes.map { String($0, radix: 16).leftPadded(to: 2) }.joined(),
            bytes.map { String($0, radix: 16, uppercase: true).leftPadded(to: 2) }.joined(),
        ]
    }

    /// The forms of `token` that `text` holds.
    static func leaks(of token: String, in text: String) -> [String] {
        all(of: token).filter { text.contains($0) }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: Swift.max(0, width - count)) + self
    }
}

@Suite("The admin token never shows in a description, a mirror or a dump")
struct AdminTokenRedactionTests {
    static let token = "s3cret-Token_42"

    /// Every way a value is turned into text: interpolation, both descriptions, a dump, and its mirror's children.
    static func renderings(of value: Any) -> [String] {
        var dumped = ""
        dump(value, to: &dumped)
        let children = Mirror(reflecting: value).children.map { "\($0.label ?? ""): \(String(reflecting: $0.value))" }
        return [String(describing: value), String(reflecting: value), "\(value)", dumped] + children
    }

    @Test("AdminAuthorization says whether a token is set, and nothing of it")
    func authorization() {
        let authorization = AdminAuthorization(token: Self.token)
        for text in Self.renderings(of: authorization) {
            #expect(TokenForms.leaks(of: Self.token, in: text).isEmpty, "\(text)")
        }
        #expect("\(authorization)" == "AdminAuthorization(token: <redacted>)")
        #expect("\(AdminAuthorization(token: nil))" == "AdminAuthorization(token: none)")
        #expect(String(reflecting: AdminAuthorization(token: " ")) == "AdminAuthorization(token: empty)")
        // The check itself: an array of the token's bytes is caught.
        #expect(!TokenForms.leaks(of: Self.token, in: "\(Array(Self.token.utf8))").isEmpty)
    }

    @Test("what holds the authorization (the service, the admin gate and handler) redacts it too")
    func holders() {
        let authorization = AdminAuthorization(token: Self.token)
        let logger = Logger(label: "redaction-test", factory: { _ in SwiftLogNoOpLogHandler() })
        let service = ProxyService(
            configuration: ProxyConfiguration(),
            logger: logger,
            adminAuthorization: authorization
        )
        let gate = AdminGate(authorization: authorization, idleTimeout: .seconds(1), requestTimeout: .seconds(1))
        let handler = AdminHTTPHandler(router: AdminRouter(), authorization: authorization, logger: logger)
        let holders: [Any] = [service, gate, handler, [authorization], Optional(authorization) as Any]
        for holder in holders {
            let renderings = Self.renderings(of: holder)
            for text in renderings {
                #expect(TokenForms.leaks(of: Self.token, in: text).isEmpty, "\(text)")
            }
            #expect(renderings.contains { $0.contains("<redacted>") }, "\(type(of: holder))")
        }
        #expect("\(service)".contains("adminAuthorization: AdminAuthorization(token: <redacted>)"))
    }
}
