import Foundation
import Testing

/// The README's first console session, run as a reader runs it: the same commands against the proxy on the
/// bundled config, the same output line for line (ports aside, and `Age`, which counts seconds).
@Suite("The README's curl session is what a reader sees", .serialized)
struct ReadmeSessionTests {
    struct Step {
        var command: String
        var output: [String]
    }

    /// The commands and outputs of the README's first `console` block.
    static func session() throws -> [Step] {
        let readme = try String(
            contentsOf: ProcessTests.repositoryRoot.appendingPathComponent("README.md"),
            encoding: .utf8
        )
        let start = try #require(readme.range(of: "```console\n"))
        let end = try #require(readme.range(of: "\n```", range: start.upperBound..<readme.endIndex))
        var steps: [Step] = []
        for line in readme[start.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("$ ") {
                steps.append(Step(command: String(line.dropFirst(2)), output: []))
            } else if !steps.isEmpty {
                steps[steps.count - 1].output.append(String(line))
            }
        }
        return steps
    }

    /// Runs `command` with /bin/sh and returns its standard output's lines.
    static func shell(_ command: String) throws -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        // `\r\n` is one Character: split on any line break, which takes the pair whole.
        return String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).map(String.init)
    }

    /// Whether `actual` is what the README shows as `expected`; `Age` may be any number of seconds.
    /// Whether every line of `actual` matches its line of `expected`.
    static func matches(_ actual: [String], _ expected: [String]) -> Bool {
        actual.count == expected.count && zip(actual, expected).allSatisfy { matches($0, $1) }
    }

    static func matches(_ actual: String, _ expected: String) -> Bool {
        if expected.hasPrefix("Age: "), actual.hasPrefix("Age: ") {
            return actual.dropFirst(5).allSatisfy(\.isNumber)
        }
        // Freshness left counts down: any ttl of whole seconds matches.
        if expected.hasPrefix("Cache-Status: "), actual.hasPrefix("Cache-Status: ") {
            return CacheStatusText.withTTLLeftOut(actual) == CacheStatusText.withTTLLeftOut(expected)
        }
        return actual == expected
    }

    @Test(
        "every command prints what the README says it prints",
        .enabled(
            if: FileManager.default.isExecutableFile(atPath: "/usr/bin/curl"),
            "the session uses curl: apt-get install curl"
        )
    )
    func sessionAsWritten() async throws {
        let steps = try Self.session()
        #expect(steps.count >= 4)
        let proxy = try await ProcessTests.RunningProxy(arguments: ["--config", "config/sdui-proxy.yaml"])
        try await waitUntil { try await ProcessTests.get("http://127.0.0.1:\(proxy.adminPort)/ready").0 == .ok }
        for step in steps {
            let command = step.command
                .replacingOccurrences(of: "localhost:8080", with: "127.0.0.1:\(proxy.publicPort)")
                .replacingOccurrences(of: "localhost:9090", with: "127.0.0.1:\(proxy.adminPort)")
            var output = try Self.shell(command)
            // The statistics count coded forms, which are made on the compression pool a moment after their
            // entry is stored: read them again until they have caught up (reading them changes nothing).
            for _ in 0..<100 where command.contains("/cache/stats") && !Self.matches(output, step.output) {
                try await Task.sleep(for: .milliseconds(20))
                output = try Self.shell(command)
            }
            #expect(output.count == step.output.count, "\(step.command): \(output)")
            for (actual, expected) in zip(output, step.output) {
                #expect(Self.matches(actual, expected), "\(step.command)")
            }
        }
        proxy.signal(SIGTERM)
        #expect(try await proxy.waitForExit() == 0)
    }
}
