import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// An answer from a stored entry, as HTTP/1.1 writes it: whether the stored head is copied whole (a hit, a miss
/// that adds its request id) or cut line by line (a 304, Beagle 1.x, a part), the bytes are the head composed
/// field by field from the entry's lines, the presentation's own fields and the annotation.
@Suite struct StoredAnswerHeadTests {
    private static func entry(_ status: HTTPResponseStatus) -> CachedResponse {
        CachedResponse(
            status: status,
            headers: [
                "Content-Type": "application/json", "Cache-Control": "max-age=60", "ETag": "\"v1\"",
                "X-Backend": "one",
            ],
            body: ByteBuffer(string: #"{"_beagleComponent_":"beagle:text","text":"hello"}"#),
            metadata: .init(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        )
    }

    /// A stored 200.
    private static let okEntry = entry(.ok)

    private static let annotation: CacheAnnotation = {
        var cache = ProxyConfiguration.Cache()
        cache.name = "edge"
        return CacheReporting(cache).annotation(
            .miss,
            CacheStatus(forward: .uriMiss, forwardStatus: 200, stored: true),
            key: nil
        )
    }()

    /// The head and body composed one field at a time: the status line, `Accept-Ranges` when advertised, each
    /// stored field the presentation keeps, its own fields, `Age`, the annotation, and the kept body bytes.
    private static func composed(
        _ presentation: EntryPresentation,
        of entry: CachedResponse = okEntry,
        closesConnection: Bool
    ) -> String {
        let status = presentation.status(of: entry)
        var head = "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n"
        if presentation.advertisesRanges(entry) { head += "Accept-Ranges: bytes\r\n" }
        let form = entry.form(nil)
        form.forEachField(common: entry.commonLines) { name, value in
            guard presentation.keepsStoredFields, presentation.keepsStoredField(name) else { return }
            head += "\(String(decoding: name, as: UTF8.self)): \(String(decoding: value, as: UTF8.self))\r\n"
        }
        presentation.forEachOwnField(of: entry, form) { name, value in head += "\(name): \(value)\r\n" }
        head += "Age: \(presentation.age)\r\n"
        presentation.annotation.forEachField(lowercased: false) { name, value in head += "\(name): \(value)\r\n" }
        head += closesConnection ? "Connection: close\r\n\r\n" : "\r\n"
        guard presentation.sendsBody else { return head }
        let body = Array(form.body.readableBytesView)
        return head + String(decoding: body[presentation.bodyRange(of: form)], as: UTF8.self)
    }

    private static func written(
        _ presentation: EntryPresentation,
        of entry: CachedResponse = okEntry,
        closesConnection: Bool
    ) -> String {
        var buffer = ByteBuffer()
        entry.withForm(nil) { form in
            #expect(
                HTTP1ResponseEncoder.writeStored(
                    entry,
                    form,
                    presentation,
                    status: presentation.status(of: entry),
                    sendsBody: presentation.sendsBody,
                    closesConnection: closesConnection,
                    into: &buffer
                ) == nil
            )
        }
        return String(buffer: buffer)
    }

    @Test(
        "a stored answer's bytes are its head composed field by field, copied whole or cut line by line",
        arguments: [false, true]
    )
    func head(closesConnection: Bool) {
        let plain = EntryPresentation(annotation: Self.annotation, age: 3)
        var withID = plain
        withID.requestID = "req-7f3a"
        var notModified = withID
        notModified.notModified = true
        var beagle = withID
        beagle.beagleMaxAge = 42
        var part = withID
        part.range = .part(2...9)
        for presentation in [plain, withID, notModified, beagle, part] {
            #expect(
                Self.written(presentation, closesConnection: closesConnection)
                    == Self.composed(presentation, closesConnection: closesConnection)
            )
        }
    }

    @Test("a stored 404 with a request id is written as composed: its own status line, no Accept-Ranges")
    func notFoundWithRequestID() {
        let notFound = Self.entry(.notFound)
        var presentation = EntryPresentation(annotation: Self.annotation, age: 1)
        presentation.requestID = "req-404"
        let head = Self.written(presentation, of: notFound, closesConnection: false)
        #expect(head == Self.composed(presentation, of: notFound, closesConnection: false))
        #expect(head.hasPrefix("HTTP/1.1 404 Not Found\r\n"))
        #expect(!head.contains("Accept-Ranges"))
        #expect(head.contains("\r\nX-Request-Id: req-404\r\nAge: 1\r\n"))
    }

    @Test("a miss's request id follows the stored lines and Content-Length, ahead of Age, in a head copied whole")
    func requestIDAfterStoredLines() throws {
        var presentation = EntryPresentation(annotation: Self.annotation, age: 0)
        presentation.requestID = "req-7f3a"
        #expect(presentation.keepsEveryStoredLine)
        let head = Self.written(presentation, closesConnection: false)
        let lines = head.components(separatedBy: "\r\n")
        let length = try #require(lines.firstIndex { $0.hasPrefix("Content-Length: ") })
        let id = try #require(lines.firstIndex(of: "X-Request-Id: req-7f3a"))
        let age = try #require(lines.firstIndex(of: "Age: 0"))
        #expect(id == length + 1)
        #expect(age == id + 1)
        #expect(lines.filter { $0.hasPrefix("X-Request-Id:") }.count == 1)
    }
}
