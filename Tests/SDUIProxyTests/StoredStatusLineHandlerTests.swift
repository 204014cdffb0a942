import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A stored entry keeps its header lines, not its status line nor a 200's `Accept-Ranges`: the handler writes those
/// from the entry's status, once, in every answer that carries them.
@Suite struct StoredStatusLineHandlerTests {
    private static let component = #"{"_beagleComponent_":"beagle:text","text":"hello"}"#

    private static func get(_ path: String, _ extraHeaders: String = "") -> String {
        "GET \(path) HTTP/1.1\r\nHost: app.example\r\n\(extraHeaders)\r\n"
    }

    private static func count(_ line: String, in raw: String) -> Int {
        raw.components(separatedBy: "\r\n").filter { $0 == line }.count
    }

    @Test("a 200 hit starts with its status line and Accept-Ranges; a part has it once, a 304 not at all")
    func okEntry() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send(Self.get("/screens/home"))
            try connection.backend.answerFetch(
                headers: ["Content-Type": "application/json", "Cache-Control": "max-age=300", "ETag": #""v1""#],
                body: Self.component
            )
            _ = try #require(try connection.readResponse())

            try connection.send(Self.get("/screens/home"))
            let hit = try #require(try connection.readResponse())
            #expect(hit.headers["x-cache"] == ["HIT"] && hit.body == Self.component)
            #expect(hit.raw.hasPrefix("HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nContent-Type: application/json\r\n"))
            #expect(Self.count("Accept-Ranges: bytes", in: hit.raw) == 1)

            try connection.send(Self.get("/screens/home", "Range: bytes=0-4\r\n"))
            let part = try #require(try connection.readResponse())
            #expect(part.status == .partialContent && part.body == String(Self.component.prefix(5)))
            #expect(part.raw.hasPrefix("HTTP/1.1 206 Partial Content\r\nAccept-Ranges: bytes\r\n"))
            #expect(Self.count("Accept-Ranges: bytes", in: part.raw) == 1)

            try connection.send(Self.get("/screens/home", "If-None-Match: \"v1\"\r\n"))
            let notModified = try #require(try connection.readResponse())
            #expect(notModified.status == .notModified)
            #expect(notModified.headers["accept-ranges"].isEmpty && notModified.headers["etag"] == [#""v1""#])
            #expect(connection.backend.fetches.count == 1)
        }
    }

    @Test("a stored 404's hit has its own status line and no Accept-Ranges")
    func notFoundEntry() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send(Self.get("/screens/gone"))
            try connection.backend.answerFetch(
                status: .notFound,
                headers: ["Content-Type": "application/json", "Cache-Control": "max-age=300"],
                body: Self.component
            )
            let miss = try #require(try connection.readResponse())
            #expect(miss.status == .notFound)

            try connection.send(Self.get("/screens/gone"))
            let hit = try #require(try connection.readResponse())
            #expect(hit.headers["x-cache"] == ["HIT"])
            #expect(hit.raw.hasPrefix("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"))
            #expect(hit.headers["accept-ranges"].isEmpty)
            #expect(connection.backend.fetches.count == 1)
        }
    }
}
