import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("A request's fields edited by name, as the proxy builds one for the backend")
struct HTTPFieldLinesEditingTests {
    private func pairs(_ fields: HTTPFieldLines) -> [String] {
        pairs(fields.headers)
    }

    private func pairs(_ headers: HTTPHeaders) -> [String] {
        headers.map { "\($0.name)=\($0.value)" }
    }

    @Test("adds keep their order and spelling; removal and replacement ignore case and leave the rest in order")
    func edits() {
        var fields = HTTPFieldLines()
        fields.add(name: "Accept", value: "*/*")
        fields.add(name: "X-Request-Id", value: "client")
        fields.add(name: "tracestate", value: "a=1")
        fields.add(name: "x-request-id", value: "again")
        fields.add(name: "Via", value: "")
        #expect(fields.first(name: "X-REQUEST-ID") == "client")
        #expect(fields.contains(name: "VIA") && fields.first(name: "via") == "")
        #expect(!fields.contains(name: "Vias") && fields.first(name: "Vi") == nil)

        fields.replaceOrAdd(name: "X-Request-Id", value: "proxy")
        fields.remove(name: "TraceState")
        fields.remove(name: "absent")
        #expect(pairs(fields) == ["Accept=*/*", "Via=", "X-Request-Id=proxy"])
        #expect(fields.count == 3)
        #expect(fields.headers.map(\.name) == ["Accept", "Via", "X-Request-Id"])
    }

    @Test("a backend's parsed fields are edited like built ones, and their separators stay out of the values")
    func editsParsedFields() throws {
        var parser = HTTPResponseParser(maximumHeadBytes: 4096)
        parser.expectResponse(isHEAD: false)
        var buffer = ByteBuffer(string: "HTTP/1.1 200 OK\r\nA:  1 \r\nB: 2\r\nContent-Length: 0\r\n\r\n")
        guard case .head(let head, _, _)? = try parser.next(from: &buffer) else {
            Issue.record("no head")
            return
        }
        var fields = head.fields
        fields.remove(name: "b")
        fields.add(name: "C", value: "3")
        #expect(pairs(fields) == ["A=1", "Content-Length=0", "C=3"])
    }

    @Test("a copy is not changed by edits to the original")
    func valueSemantics() {
        var original = HTTPFieldLines(["A": "1", "B": "2"])
        let copy = original
        original.remove(name: "a")
        original.replaceOrAdd(name: "B", value: "3")
        #expect(pairs(copy) == ["A=1", "B=2"])
        #expect(pairs(original) == ["B=3"])
    }

    @Test("random edits leave the same fields, in the same order, as the same edits of HTTPHeaders")
    func matchesHTTPHeaders() {
        var random = SplitMix64(seed: 0x4649_454C_4453)
        let names = ["Accept", "accept", "X-Request-Id", "tracestate", "Via", "Content-Length", "A", "B"]
        let values = ["", "1", "*/*", "a value longer than fifteen bytes", "caf\u{E9}"]
        for round in 0..<300 {
            var fields = HTTPFieldLines()
            var headers = HTTPHeaders()
            for _ in 0..<Int(random.next() % 12) {
                let name = names[Int(random.next() % UInt64(names.count))]
                let value = values[Int(random.next() % UInt64(values.count))]
                switch random.next() % 3 {
                case 0:
                    fields.add(name: name, value: value)
                    headers.add(name: name, value: value)
                case 1:
                    fields.remove(name: name)
                    headers.remove(name: name)
                default:
                    fields.replaceOrAdd(name: name, value: value)
                    headers.replaceOrAdd(name: name, value: value)
                }
            }
            #expect(pairs(fields) == pairs(headers), "round \(round)")
            for name in names {
                #expect(fields.first(name: name) == headers.first(name: name), "round \(round), \(name)")
                #expect(fields.contains(name: name) == headers.contains(name: name), "round \(round), \(name)")
            }
        }
    }
}
