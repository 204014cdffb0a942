import Foundation
import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import SDUIProxy

@Suite("Failures of the backend are logged once per key and kind an interval")
struct FailureLogTests {
    private func logger(_ collector: LineCollector, level: Logger.Level = .info) -> Logger {
        Logger(label: "test") { label in
            LoggingBootstrap.makeHandler(label: label, format: .json, level: level, sink: collector.sink)
        }
    }

    @Test("repeats are left out and counted; the next line after the interval carries the count")
    func throttles() throws {
        let collector = LineCollector()
        // The loop's clock, which only the test moves.
        let clock = EmbeddedEventLoop()
        let log = FailureLog(logger: logger(collector), interval: .seconds(2), now: { clock.now })
        for _ in 0..<50 {
            log.log(level: .info, "miss, upstream failed", key: "/a", kind: "network", metadata: ["key": "/a"])
        }
        log.log(level: .info, "miss, upstream failed", key: "/b", kind: "network", metadata: ["key": "/b"])
        #expect(collector.lines.count == 2)
        clock.advanceTime(by: .milliseconds(1999))
        log.log(level: .info, "miss, upstream failed", key: "/a", kind: "network", metadata: ["key": "/a"])
        #expect(collector.lines.count == 2, "still inside the interval")
        clock.advanceTime(by: .milliseconds(1))
        log.log(level: .info, "miss, upstream failed", key: "/a", kind: "network", metadata: ["key": "/a"])
        let objects = try collector.objects()
        #expect(objects.count == 3)
        #expect(objects.last?["suppressed"] as? String == "50")
        #expect(objects.first?["suppressed"] == nil)
    }

    @Test("a level the logger does not write costs no decision and writes nothing")
    func belowLevel() throws {
        let collector = LineCollector()
        let log = FailureLog(logger: logger(collector, level: .warning))
        log.log(level: .info, "miss, upstream failed", key: "/a", kind: "network", metadata: [:])
        log.log(level: .warning, "invalid component", key: "/a", kind: "decoding", metadata: [:])
        #expect(collector.lines.count == 1)
    }

    @Test("a backend outage under load writes one line per URL, not one per failed miss")
    func outageThroughTheProxy() async throws {
        let collector = LineCollector()
        try await ProxyHarness.run(logger: logger(collector)) { proxy async throws in
            try await proxy.origin.stop()
            // Ten, well inside the log's ten-second interval even at a loaded machine's quarter second a request.
            for _ in 0..<10 {
                #expect(try await proxy.get("/screens/home").status == .badGateway)
            }
            try await proxy.origin.restart()
        }
        let failures = try collector.objects().filter { $0["msg"] as? String == "miss, upstream failed" }
        #expect(failures.count == 1)
        #expect((failures.first?["_error"] as? String)?.contains("connection refused") == true, "\(failures)")
    }
}
