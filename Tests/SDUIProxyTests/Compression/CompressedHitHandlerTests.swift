import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The public connection handler writing a stored coded form: its own head, as stored, in one write with its body.
@Suite struct CompressedHitHandlerTests {
    private static let component: String = {
        let items = (0..<20).map { #"{"_beagleComponent_":"beagle:text","text":"row \#($0)"}"# }
        return #"{"_beagleComponent_":"beagle:screenComponent","children":["# + items.joined(separator: ",") + "]}"
    }()

    private static func get(_ path: String, method: String = "GET", _ extraHeaders: String = "") -> String {
        "\(method) \(path) HTTP/1.1\r\nHost: app.example\r\n\(extraHeaders)\r\n"
    }

    @Test("without a compression pool a body is compressed before it is stored: its miss gets the gzip form")
    func missGetsTheCodedForm() throws {
        try EmbeddedPublicConnection.run(keepsCompressedForms: true) { connection in
            try connection.send(Self.get("/screens/home", "Accept-Encoding: gzip\r\n"))
            try connection.backend.answerFetch(
                headers: ["Content-Type": "application/json", "Cache-Control": "max-age=300", "ETag": #""h1""#],
                body: Self.component
            )
            let miss = try #require(try connection.readResponse())
            #expect(miss.headers["x-cache"] == ["MISS"] && miss.headers["content-encoding"] == ["gzip"])
            #expect(miss.headers["etag"] == [#""h1-gzip""#])
            #expect(connection.backend.fetches.first?.headers.first(name: "accept-encoding") == "identity")
        }
    }

    @Test("a gzip hit is one write of the stored form's head and body; HEAD has the same head and no body")
    func codedHitIsOneWrite() throws {
        try EmbeddedPublicConnection.run(keepsCompressedForms: true) { connection in
            try connection.send(Self.get("/screens/home"))
            try connection.backend.answerFetch(
                headers: ["Content-Type": "application/json", "Cache-Control": "max-age=300"],
                body: Self.component
            )
            let identity = try #require(try connection.readResponse())
            #expect(identity.headers["content-encoding"].isEmpty && identity.body == Self.component)
            // The first client to ask for gzip is answered in identity, and has the gzip form made (here, there
            // being no pool, before its answer).
            try connection.send(Self.get("/screens/home", "Accept-Encoding: gzip\r\n"))
            let first = try #require(try connection.readResponse())
            #expect(first.headers["x-cache"] == ["HIT"] && first.headers["content-encoding"].isEmpty)

            try connection.send(Self.get("/screens/home", "Accept-Encoding: br;q=0, gzip\r\n"))
            #expect(connection.countWrites() == 1)
            let hit = try #require(try connection.readResponse())
            #expect(hit.headers["x-cache"] == ["HIT"] && hit.headers["content-encoding"] == ["gzip"])
            let length = try #require(hit.headers["content-length"].first.flatMap { Int($0) })
            #expect(length < Self.component.utf8.count / 2)
            #expect(hit.headers["vary"] == ["beagle-platform, Accept-Encoding"])

            try connection.send(Self.get("/screens/home", method: "HEAD", "Accept-Encoding: gzip\r\n"))
            let head = try #require(try connection.readResponse(isHEAD: true))
            #expect(head.body.isEmpty)
            for name in ["content-encoding", "content-length", "etag", "vary", "content-type"] {
                #expect(head.headers[name] == hit.headers[name], "\(name)")
            }
            #expect(connection.backend.fetches.count == 1)
        }
    }
}
