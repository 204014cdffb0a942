import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOHTTP1
import Testing

@testable import SDUIProxy

private func jsonLogger(_ collector: LineCollector, label: String = "test", level: Logger.Level = .trace) -> Logger {
    Logger(label: label) { label in
        LoggingBootstrap.makeHandler(label: label, format: .json, level: level, sink: collector.sink)
    }
}

@Suite("Logs: JSON lines, text lines and the access log")
struct LoggingTests {
    @Test("a JSON line parses and carries the fixed fields and the metadata, flattened and typed")
    func jsonLineFields() throws {
        let collector = LineCollector()
        var logger = jsonLogger(collector, label: "sdui-proxy.test")
        logger[metadataKey: "instance"] = "a"
        logger.info(
            "listening",
            metadata: [
                "port": .stringConvertible(8080),
                "ratio": .stringConvertible(0.5),
                "draining": .stringConvertible(false),
                "host": "0.0.0.0",
            ]
        )

        #expect(collector.lines.count == 1)
        let line = try #require(collector.lines.first)
        #expect(line.hasSuffix("}\n"))
        #expect(line.dropLast().contains("\n") == false)
        let object = try #require(try collector.objects().first)
        #expect(object["level"] as? String == "info")
        #expect(object["label"] as? String == "sdui-proxy.test")
        #expect(object["msg"] as? String == "listening")
        #expect(object["instance"] as? String == "a")
        #expect(object["host"] as? String == "0.0.0.0")
        #expect((object["port"] as? NSNumber)?.intValue == 8080)
        #expect((object["ratio"] as? NSNumber)?.doubleValue == 0.5)
        #expect(object["draining"] as? Bool == false)
        #expect(object["source"] as? String == "SDUIProxyTests")
        let timestamp = try #require(object["ts"] as? String)
        #expect(timestamp.count == 24 && timestamp.hasSuffix("Z") && timestamp.contains("T"))
        // The fixed fields come first, in a stable order.
        #expect(line.hasPrefix(#"{"ts":""#))
        #expect(line.contains(#"","level":"info","label":"sdui-proxy.test","msg":"listening","#))
    }

    @Test("quotes, backslashes, newlines and control characters are escaped and round-trip")
    func jsonEscaping() throws {
        let collector = LineCollector()
        let logger = jsonLogger(collector)
        let message = "say \"hi\"\\ then\nnew line\r\ttab \u{01}\u{1F} bell\u{07} é ✓ 🚀"
        logger.warning(
            "\(message)",
            metadata: ["quote\"key\n": .string(message), "nested": ["list": ["a\"b", "c\nd"]]]
        )

        let line = try #require(collector.lines.first)
        #expect(line.filter { $0 == "\n" }.count == 1)
        #expect(line.unicodeScalars.allSatisfy { $0.value >= 0x20 || $0 == "\n" })
        #expect(line.contains(#"\u0001"#) && line.contains(#"\u001f"#) && line.contains(#"\u0007"#))
        #expect(line.contains(#"say \"hi\"\\ then\nnew line\r\ttab"#))
        let object = try #require(try collector.objects().first)
        #expect(object["msg"] as? String == message)
        #expect(object["quote\"key\n"] as? String == message)
        let nested = try #require(object["nested"] as? [String: Any])
        #expect(nested["list"] as? [String] == ["a\"b", "c\nd"])
    }

    @Test("levels below the handler's level are not written")
    func levelsFiltered() throws {
        let collector = LineCollector()
        let logger = jsonLogger(collector, level: .warning)
        logger.trace("t")
        logger.debug("d")
        logger.info("i")
        logger.notice("n")
        logger.warning("w")
        logger.error("e")
        logger.critical("c")

        let levels = try collector.objects().map { $0["level"] as? String }
        #expect(levels == ["warning", "error", "critical"])
        let messages = try collector.objects().map { $0["msg"] as? String }
        #expect(messages == ["w", "e", "c"])
    }

    @Test("a metadata key named like a fixed field keeps the fixed field and is written with an underscore")
    func reservedKeys() throws {
        let collector = LineCollector()
        let logger = jsonLogger(collector)
        logger.error("real", metadata: ["level": "fake", "msg": "fake", "source": "fake"])

        let object = try #require(try collector.objects().first)
        #expect(object["level"] as? String == "error")
        #expect(object["msg"] as? String == "real")
        #expect(object["_level"] as? String == "fake")
        #expect(object["_msg"] as? String == "fake")
        #expect(object["_source"] as? String == "fake")
        #expect(object["source"] as? String == "SDUIProxyTests")
    }

    @Test("timestamps are RFC 3339 UTC with milliseconds")
    func timestamps() {
        #expect(JSONLogHandler.timestamp(seconds: 0, milliseconds: 5) == "1970-01-01T00:00:00.005Z")
        #expect(JSONLogHandler.timestamp(seconds: 1_800_000_000, milliseconds: 999) == "2027-01-15T08:00:00.999Z")
        #expect(JSONLogHandler.timestamp(seconds: 951_782_400, milliseconds: 0) == "2000-02-29T00:00:00.000Z")
    }

    @Test("the text format writes one human-readable line with key=value metadata")
    func textFormat() {
        let collector = LineCollector()
        let logger = Logger(label: "plain") { label in
            LoggingBootstrap.makeHandler(label: label, format: .text, level: .info, sink: collector.sink)
        }
        logger.debug("hidden")
        logger.info("started", metadata: ["port": "8080"])

        #expect(collector.lines.count == 1)
        let line = collector.lines.first ?? ""
        #expect(line.hasSuffix("[SDUIProxyTests] started\n"))
        #expect(line.contains(" info plain: port=8080 "))
    }

    @Test("LogFormat parses the config values text and json")
    func formatValues() {
        #expect(LogFormat(rawValue: "text") == .text)
        #expect(LogFormat(rawValue: "json") == .json)
        #expect(LogFormat(rawValue: "yaml") == nil)
    }

    @Test("an access log entry is one info line whose fields are JSON fields")
    func accessLogJSON() throws {
        let collector = LineCollector()
        let logger = jsonLogger(collector, label: "sdui-proxy.access")
        AccessLogEntry(
            method: .GET,
            path: "/screens/home?tab=1",
            status: .ok,
            cacheResult: "HIT",
            bytes: 1234,
            duration: .microseconds(412),
            upstreamDuration: .milliseconds(12),
            clientAddress: "127.0.0.1",
            platform: "IOS",
            requestID: "waiter-2",
            leaderRequestID: "leader-1"
        ).log(to: logger)

        #expect(collector.lines.count == 1)
        let object = try #require(try collector.objects().first)
        #expect(object["level"] as? String == "info")
        #expect(object["msg"] as? String == "request")
        #expect(object["method"] as? String == "GET")
        #expect(object["path"] as? String == "/screens/home?tab=1")
        #expect((object["status"] as? NSNumber)?.intValue == 200)
        #expect(object["cache"] as? String == "HIT")
        #expect((object["bytes"] as? NSNumber)?.intValue == 1234)
        #expect((object["duration_ms"] as? NSNumber)?.doubleValue == 0.412)
        #expect((object["upstream_ms"] as? NSNumber)?.doubleValue == 12)
        #expect(object["client"] as? String == "127.0.0.1")
        #expect(object["platform"] as? String == "IOS")
        #expect(object["request_id"] as? String == "waiter-2")
        // A request that waited for another's fill names the request whose exchange answered it.
        #expect(object["leader_request_id"] as? String == "leader-1")
    }

    @Test("an access log entry leaves out what is unknown, and percent-encodes control characters in the path")
    func accessLogOptionalFields() throws {
        let collector = LineCollector()
        let logger = jsonLogger(collector)
        AccessLogEntry(
            method: .POST,
            path: "/forms/submit\r\nX-Forged: 1",
            status: .badGateway,
            bytes: 0,
            duration: .seconds(2)
        ).log(to: logger)

        let object = try #require(try collector.objects().first)
        #expect(object["cache"] == nil)
        #expect(object["upstream_ms"] == nil)
        #expect(object["client"] == nil)
        #expect(object["leader_request_id"] == nil)
        #expect((object["status"] as? NSNumber)?.intValue == 502)
        #expect((object["duration_ms"] as? NSNumber)?.doubleValue == 2000)
        #expect(object["path"] as? String == "/forms/submit%0D%0AX-Forged: 1")
    }

    @Test("an access log entry is dropped when the logger's level is above info")
    func accessLogLevel() {
        let collector = LineCollector()
        let logger = jsonLogger(collector, level: .warning)
        AccessLogEntry(method: .GET, path: "/", status: .ok, bytes: 1, duration: .zero).log(to: logger)
        #expect(collector.lines.isEmpty)
    }
}
