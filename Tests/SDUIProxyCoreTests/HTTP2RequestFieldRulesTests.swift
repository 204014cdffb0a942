import SDUIProxyCore
import Testing

/// RFC 9113 sections 8.2 and 8.3, rule by rule: what makes an HTTP/2 request's header block malformed.
@Suite("The rules an HTTP/2 request's header block follows")
struct HTTP2RequestFieldRulesTests {
    private static let pseudoHeaders = [(":method", "GET"), (":scheme", "https"), (":path", "/screens/a")]

    /// The first violation of `fields`, checked in order, then as a whole.
    private static func violation(
        _ fields: [(String, String)],
        trailers: Bool = false
    ) -> HTTP2RequestFieldRules.Violation? {
        var rules = HTTP2RequestFieldRules(trailers: trailers)
        for (name, value) in fields {
            if let violation = rules.check(name: name, value: value) { return violation }
        }
        return rules.finish()
    }

    @Test("a request with its pseudo-headers first and lower-case fields after is well-formed")
    func wellFormed() {
        #expect(Self.violation(Self.pseudoHeaders) == nil)
        #expect(
            Self.violation(
                [(":authority", "app.example")] + Self.pseudoHeaders + [
                    ("accept", "application/json"), ("beagle-platform", "IOS"), ("te", "trailers"),
                    ("x-empty", ""), ("user-agent", "app/1.0 (iPhone;\tiOS 18)"), ("x-utf8", "caf\u{e9}"),
                ]
            ) == nil
        )
    }

    @Test("section 8.3.1: :method, :scheme and :path each once, :path not empty; no other pseudo-header")
    func pseudoHeaderSet() {
        #expect(Self.violation([(":method", "GET"), (":path", "/")]) != nil, "no :scheme")
        #expect(Self.violation([(":method", "GET"), (":scheme", "https")]) != nil, "no :path")
        #expect(Self.violation([(":scheme", "https"), (":path", "/")]) != nil, "no :method")
        #expect(Self.violation(Self.pseudoHeaders + [(":method", "POST")]) != nil, "a second :method")
        #expect(Self.violation([(":method", "GET"), (":scheme", "https"), (":path", "")]) != nil, "an empty :path")
        #expect(Self.violation(Self.pseudoHeaders + [(":status", "200")]) != nil, "a response's pseudo-header")
        #expect(Self.violation(Self.pseudoHeaders + [(":protocol", "websocket")]) != nil, "extended CONNECT")
        #expect(Self.violation([(":Method", "GET"), (":scheme", "https"), (":path", "/")]) != nil, "upper case")
        #expect(Self.violation([(":method", "G T"), (":scheme", "https"), (":path", "/")]) != nil, "not a token")
        #expect(Self.violation(Self.pseudoHeaders + [(":authority", "a b")]) != nil, "white space in an authority")
        #expect(Self.violation([(":method", "GET"), (":scheme", "ht\ttps"), (":path", "/")]) != nil, "a tab")
        #expect(Self.violation([(":method", "GET"), (":scheme", "https"), (":path", "/a b")]) != nil, "a space")
    }

    @Test("section 8.3: every pseudo-header comes before the first regular field")
    func pseudoHeadersFirst() {
        #expect(Self.violation([("accept", "*/*")] + Self.pseudoHeaders) != nil)
        #expect(
            Self.violation([(":method", "GET"), (":scheme", "https"), ("accept", "*/*"), (":path", "/")]) != nil
        )
    }

    @Test("section 8.5: a CONNECT request names :authority and neither :scheme nor :path")
    func connect() {
        #expect(Self.violation([(":method", "CONNECT"), (":authority", "backend:443")]) == nil)
        #expect(Self.violation([(":method", "CONNECT")]) != nil, "no :authority")
        #expect(
            Self.violation([(":method", "CONNECT"), (":authority", "backend:443"), (":path", "/")]) != nil,
            "a :path"
        )
        // Methods are case-sensitive: `connect` is some other method, which needs a :path like any.
        #expect(Self.violation([(":method", "connect"), (":authority", "backend:443")]) != nil)
    }

    @Test("section 8.2.1: names are lower-case tokens, not empty")
    func names() {
        #expect(Self.violation(Self.pseudoHeaders + [("Accept", "*/*")]) != nil, "a capital letter")
        #expect(Self.violation(Self.pseudoHeaders + [("x field", "1")]) != nil, "a space")
        #expect(Self.violation(Self.pseudoHeaders + [("x:field", "1")]) != nil, "a colon inside")
        #expect(Self.violation(Self.pseudoHeaders + [("", "1")]) != nil, "empty")
        #expect(Self.violation(Self.pseudoHeaders + [("caf\u{e9}", "1")]) != nil, "not ASCII")
    }

    @Test("section 8.2.1: values hold no CR, LF, NUL or other control byte but the tab, and no white space at an end")
    func values() {
        for value in [
            "a\r\nx-smuggled: 1", "a\nb", "a\rb", "a\u{0}b", "a\u{7f}b", "a\u{1b}b", " a", "a ", "\ta", "a\t",
        ] {
            #expect(Self.violation(Self.pseudoHeaders + [("x-note", value)]) != nil, "\(value.debugDescription)")
        }
        #expect(Self.violation([(":method", "GET"), (":scheme", "https"), (":path", "/a\r\nb")]) != nil)
        #expect(Self.violation(Self.pseudoHeaders + [("x-note", "a b\tc")]) == nil, "white space inside is fine")
    }

    @Test("section 8.2.2: connection-specific fields are malformed; te may only say trailers")
    func connectionSpecific() {
        for name in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
            #expect(Self.violation(Self.pseudoHeaders + [(name, "x")]) != nil, "\(name)")
        }
        #expect(Self.violation(Self.pseudoHeaders + [("te", "gzip")]) != nil)
        #expect(Self.violation(Self.pseudoHeaders + [("te", "trailers")]) == nil)
        // Look-alikes of the same lengths pass.
        #expect(Self.violation(Self.pseudoHeaders + [("tx", "1"), ("upgrad3", "1"), ("connectio0", "1")]) == nil)
    }

    @Test("section 8.1: trailers carry no pseudo-header field, and their fields follow the same rules")
    func trailers() {
        #expect(Self.violation([("x-checksum", "abc")], trailers: true) == nil)
        #expect(Self.violation([], trailers: true) == nil, "nothing is required of trailers")
        #expect(Self.violation([(":path", "/")], trailers: true) != nil)
        #expect(Self.violation([("X-Checksum", "abc")], trailers: true) != nil)
        #expect(Self.violation([("x-checksum", "a\r\nb")], trailers: true) != nil)
    }
}
