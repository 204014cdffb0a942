import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

/// What one head and its body read as: what every later step sees of a request.
private struct Reading: Equatable, CustomStringConvertible {
    var method = ""
    var uri = ""
    var headers: [String] = []
    var keepsConnectionOpen = false
    var body: [UInt8] = []
    var failure: String?

    var description: String {
        failure.map { "FAILED \($0)" }
            ?? "\(method) \(uri) \(headers) keep-alive \(keepsConnectionOpen) body \(body.count)"
    }
}

/// Reads the request at the start of `buffer` with `parser`, to its end or its failure.
private func read(_ buffer: inout ByteBuffer, with parser: inout HTTPRequestParser) -> Reading {
    var reading = Reading()
    do {
        while let part = try parser.next(from: &buffer) {
            switch part {
            case .head(let head):
                reading.method = head.method.rawValue
                reading.uri = head.uri
                reading.headers = head.headers.map { "\($0.name): \($0.value)" }
                reading.keepsConnectionOpen = parser.headKeepsConnectionOpen
            case .body(let bytes): reading.body += bytes.readableBytesView
            case .end: return reading
            }
        }
        reading.failure = "incomplete"
    } catch {
        reading.failure = error.reason
    }
    return reading
}

/// The address of a string's bytes: the same for two strings only when they share one buffer.
private func storage(of string: String) -> UnsafeRawPointer? {
    string.utf8.withContiguousStorageIfAvailable { UnsafeRawPointer($0.baseAddress) } ?? nil
}

@Suite("Request heads that repeat the last head's fields")
struct RepeatedRequestFieldsTests {
    /// A head's field lines, one per line, with the body they frame.
    private static let fieldSets: [(lines: String, body: String)] = [
        ("Host: proxy\r\nbeagle-platform: IOS\r\nAccept-Encoding: br, gzip\r\n", ""),
        ("Host: proxy\r\nbeagle-platform: ANDROID\r\nAccept-Encoding: br, gzip\r\n", ""),
        ("Host: proxy\r\nConnection: close\r\n", ""),
        ("Host: proxy\r\nContent-Length: 5\r\n", "hello"),
        ("Host: proxy\r\nContent-Length: 3\r\n", "abc"),
        ("Host: proxy\r\nTransfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
        ("Host: proxy\r\nUser-Agent: an app/1.0 (a phone; with a long description)\r\n", ""),
        ("", ""),
    ]

    @Test("a connection's heads read as each would alone, whichever repeat the last one's fields, exactly or nearly")
    func repeatedOrNotEveryHeadReadsAsAlone() {
        var random = SplitMix64(seed: 0xF1E1D5)
        var parser = HTTPRequestParser(maximumHeadBytes: 16 << 10)
        var repeats = 0
        var previous = ""
        for round in 0..<3000 {
            var (lines, body) = Self.fieldSets[Int(random.next() % UInt64(Self.fieldSets.count))]
            // Often the same lines again (what a keep-alive client sends), sometimes with one byte changed.
            if round > 0, random.next() % 2 == 0 { lines = previous }
            var fieldBytes = Array(lines.utf8)
            if !fieldBytes.isEmpty, random.next() % 4 == 0 {
                let alphabet = Array("\r\n :\t\u{0}aZ09,".utf8)
                fieldBytes[Int(random.next() % UInt64(fieldBytes.count))] =
                    alphabet[Int(random.next() % UInt64(alphabet.count))]
            }
            let mutated = String(decoding: fieldBytes, as: UTF8.self)
            let method = body.isEmpty ? "GET" : "POST"
            let request =
                Array("\(method) /screens/\(round) HTTP/1.1\r\n".utf8) + fieldBytes + Array("\r\n\(body)".utf8)
            if mutated == previous { repeats += 1 }
            previous = mutated

            var alone = HTTPRequestParser(maximumHeadBytes: 16 << 10)
            var aloneBuffer = ByteBuffer(bytes: request)
            let expected = read(&aloneBuffer, with: &alone)
            var buffer = ByteBuffer(bytes: request)
            let reading = read(&buffer, with: &parser)
            #expect(reading == expected, "round \(round): \(String(decoding: request, as: UTF8.self).debugDescription)")
            // A connection ends at a refused request or one that closes it: a new one starts.
            if reading.failure != nil || !reading.keepsConnectionOpen || buffer.readableBytes > 0 {
                parser = HTTPRequestParser(maximumHeadBytes: 16 << 10)
            }
        }
        // Enough heads repeated the last one's fields for the comparison to be about them.
        #expect(repeats > 1000)
    }

    @Test("a head that repeats the last head's fields takes them as they were read; one that differs is read anew")
    func repeatedFieldsAreTakenNotRead() throws {
        var parser = HTTPRequestParser(maximumHeadBytes: 16 << 10)
        let agent = "User-Agent: an app/1.0 (a phone; with a long description)\r\n"
        func userAgent(_ head: String) throws -> String {
            var buffer = ByteBuffer(string: head)
            guard case .head(let head)? = try parser.next(from: &buffer) else {
                Issue.record("no head in \(head.debugDescription)")
                return ""
            }
            _ = try parser.next(from: &buffer)
            return try #require(head.headers.first(name: "user-agent"))
        }
        let first = try userAgent("GET /a HTTP/1.1\r\nHost: p\r\n\(agent)\r\n")
        let second = try userAgent("GET /b HTTP/1.1\r\nHost: p\r\n\(agent)\r\n")
        // Longer than a string keeps in place: each reading of the line would make a buffer of its own.
        #expect(storage(of: first) != nil && storage(of: first) == storage(of: second))
        // The host differs by one byte: every line is read again.
        let third = try userAgent("GET /c HTTP/1.1\r\nHost: q\r\n\(agent)\r\n")
        #expect(third == first && storage(of: third) != storage(of: first))
    }

    @Test("copies of one parser share what it kept, and each still reads every head as it would alone")
    func copiesShareTheKeptFieldsAndReadAsAlone() throws {
        var random = SplitMix64(seed: 0xC0_11E5)
        // The handler reads with a copy of its parser and writes it back: copies taken at different times, each
        // reading in turn, must agree with a fresh parser whatever the other copies kept last.
        var copies = [HTTPRequestParser(maximumHeadBytes: 16 << 10)]
        copies.append(copies[0])
        copies.append(copies[0])
        for round in 0..<600 {
            let (lines, body) = Self.fieldSets[Int(random.next() % UInt64(Self.fieldSets.count))]
            let method = body.isEmpty ? "GET" : "POST"
            let request = "\(method) /screens/\(round) HTTP/1.1\r\n\(lines)\r\n\(body)"
            var alone = HTTPRequestParser(maximumHeadBytes: 16 << 10)
            var aloneBuffer = ByteBuffer(string: request)
            let expected = read(&aloneBuffer, with: &alone)
            let which = Int(random.next() % UInt64(copies.count))
            var buffer = ByteBuffer(string: request)
            #expect(read(&buffer, with: &copies[which]) == expected, "round \(round) copy \(which)")
        }

        // What one copy kept, another takes: the same long value, one string.
        let agent = "User-Agent: an app/1.0 (a phone; with a long description)\r\n"
        var values: [String] = []
        for index in [0, 1] {
            var buffer = ByteBuffer(string: "GET /\(index) HTTP/1.1\r\nHost: p\r\n\(agent)\r\n")
            guard case .head(let head)? = try copies[index].next(from: &buffer) else {
                Issue.record("no head")
                return
            }
            _ = try copies[index].next(from: &buffer)
            values.append(try #require(head.headers.first(name: "user-agent")))
        }
        #expect(values[0] == values[1] && storage(of: values[0]) == storage(of: values[1]))
    }

    @Test("field lines as long as the kept bound are kept; one byte longer, they are read every time")
    func longFieldLinesAreNotKept() throws {
        // The lines after the request line, without the blank line: `Host: p`, CRLF, then the cookie's line.
        func cookieFilling(_ bytes: Int) -> String {
            "Cookie: " + String(repeating: "c", count: bytes - "Host: p\r\nCookie: ".utf8.count)
        }
        for (bytes, kept) in [
            (RepeatedRequestFields.maximumBytes, true), (RepeatedRequestFields.maximumBytes + 1, false),
        ] {
            var parser = HTTPRequestParser(maximumHeadBytes: 16 << 10)
            var values: [String] = []
            for target in ["/a", "/b"] {
                var buffer = ByteBuffer(string: "GET \(target) HTTP/1.1\r\nHost: p\r\n\(cookieFilling(bytes))\r\n\r\n")
                guard case .head(let head)? = try parser.next(from: &buffer) else {
                    Issue.record("no head")
                    return
                }
                _ = try parser.next(from: &buffer)
                values.append(try #require(head.headers.first(name: "cookie")))
            }
            #expect(values[0] == values[1] && (storage(of: values[0]) == storage(of: values[1])) == kept, "\(bytes)")
        }
    }

    @Test("pipelined heads in one buffer, repeating and changing their fields, each read as its own")
    func pipelinedHeadsReadAsTheirOwn() throws {
        var parser = HTTPRequestParser(maximumHeadBytes: 16 << 10)
        let platforms = ["IOS", "IOS", "ANDROID", "IOS", "IOS", "WEB"]
        var buffer = ByteBuffer(
            string: platforms.enumerated().map {
                "GET /\($0.offset) HTTP/1.1\r\nHost: p\r\nbeagle-platform: \($0.element)\r\n\r\n"
            }
            .joined()
        )
        var read: [String] = []
        while let part = try parser.next(from: &buffer) {
            if case .head(let head) = part { read.append(head.headers.first(name: "beagle-platform") ?? "") }
        }
        #expect(read == platforms)
    }
}
