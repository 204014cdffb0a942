import Logging
import SDUIProxyCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A `LogHandler` that writes one JSON object per line, for log shippers that parse structured logs.
///
/// A line looks like
/// `{"ts":"2026-11-21T10:15:02.123Z","level":"info","label":"sdui-proxy","msg":"listening","port":8080,"source":"SDUIProxy"}`:
/// the fixed fields first, then the metadata keys (sorted, so lines are stable), then the event's error, if
/// any, and its source. Metadata values that are integers, finite floating-point numbers or booleans are
/// written as JSON numbers and booleans; every other value is a JSON string; nested arrays and dictionaries
/// stay nested. A metadata key that equals a fixed field's name is written with a leading underscore
/// (`_level`), so the fixed fields keep their meaning.
public struct JSONLogHandler: LogHandler {
    /// The field names the handler writes itself.
    static let reservedKeys: Set<String> = ["ts", "level", "label", "msg", "error", "source"]

    /// The logger's label, written in every line.
    public let label: String
    /// Where the lines go.
    public let sink: LogSink
    /// The lowest level written; the `Logger` drops events below it before they reach the handler.
    public var logLevel: Logger.Level
    /// Metadata written in every line (a logger's `logger[metadataKey:]` values).
    public var metadata: Logger.Metadata = [:]
    /// Contributes metadata to every line when it is written.
    public var metadataProvider: Logger.MetadataProvider?

    /// Creates a handler writing to `sink`.
    ///
    /// - Parameters:
    ///   - label: the logger's label.
    ///   - level: the lowest level that is written.
    ///   - sink: where lines go; standard error by default.
    ///   - metadataProvider: contributes metadata to every line (task-local values, trace ids, ...).
    public init(
        label: String,
        level: Logger.Level = .info,
        sink: LogSink = .standardError,
        metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider
    ) {
        self.label = label
        self.logLevel = level
        self.sink = sink
        self.metadataProvider = metadataProvider
    }

    /// One of the handler's metadata values.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes `event` as one JSON line.
    public func log(event: LogEvent) {
        sink.write(line(for: event, timestamp: Self.timestamp()))
    }

    /// The JSON line (newline included) for `event`, stamped with `timestamp`.
    func line(for event: LogEvent, timestamp: String) -> String {
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty {
            merged.merge(provided) { _, new in new }
        }
        if let own = event.metadata, !own.isEmpty {
            merged.merge(own) { _, new in new }
        }

        var line = "{\"ts\":\""
        line.reserveCapacity(128 + merged.count * 24)
        line += timestamp
        line += "\",\"level\":\""
        line += event.level.rawValue
        line += "\",\"label\":"
        line += JSONText.quoted(label)
        line += ",\"msg\":"
        line += JSONText.quoted(event.message.description)
        for key in merged.keys.sorted() {
            line += ","
            line += JSONText.quoted(Self.reservedKeys.contains(key) ? "_" + key : key)
            line += ":"
            Self.append(merged[key]!, to: &line)
        }
        if let error = event.error {
            line += ",\"error\":"
            line += JSONText.quoted(String(describing: error))
        }
        line += ",\"source\":"
        line += JSONText.quoted(event.source)
        line += "}\n"
        return line
    }

    /// Appends `value` as JSON.
    static func append(_ value: Logger.MetadataValue, to line: inout String) {
        switch value {
        case .string(let text):
            line += JSONText.quoted(text)
        case .stringConvertible(let convertible):
            switch convertible {
            case let flag as Bool:
                line += flag ? "true" : "false"
            case let integer as any BinaryInteger:
                line += integer.description
            case let number as Double where number.isFinite:
                line += number.description
            case let number as Float where number.isFinite:
                line += number.description
            default:
                line += JSONText.quoted(convertible.description)
            }
        case .array(let values):
            line += "["
            for (index, element) in values.enumerated() {
                if index > 0 { line += "," }
                append(element, to: &line)
            }
            line += "]"
        case .dictionary(let dictionary):
            line += "{"
            for (index, key) in dictionary.keys.sorted().enumerated() {
                if index > 0 { line += "," }
                line += JSONText.quoted(key)
                line += ":"
                append(dictionary[key]!, to: &line)
            }
            line += "}"
        }
    }

    /// The current UTC time as RFC 3339 with milliseconds: `2026-11-21T10:15:02.123Z`.
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return timestamp(seconds: Int(now.tv_sec), milliseconds: Int(now.tv_nsec) / 1_000_000)
    }

    /// `seconds` since the Unix epoch, plus `milliseconds`, as RFC 3339 UTC.
    static func timestamp(seconds: Int, milliseconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        var text = ""
        text.reserveCapacity(24)
        func pad(_ value: Int32, _ width: Int) {
            let digits = String(value)
            if digits.count < width { text += String(repeating: "0", count: width - digits.count) }
            text += digits
        }
        pad(parts.tm_year + 1900, 4)
        text += "-"
        pad(parts.tm_mon + 1, 2)
        text += "-"
        pad(parts.tm_mday, 2)
        text += "T"
        pad(parts.tm_hour, 2)
        text += ":"
        pad(parts.tm_min, 2)
        text += ":"
        pad(parts.tm_sec, 2)
        text += "."
        pad(Int32(milliseconds), 3)
        text += "Z"
        return text
    }
}

/// Where a log handler's lines go: standard error, or a closure (tests collect lines this way).
public struct LogSink: Sendable {
    private let writeLine: @Sendable (String) -> Void

    /// A sink that hands every line, newline included, to `writeLine`. It may be called from any thread.
    public init(_ writeLine: @escaping @Sendable (String) -> Void) {
        self.writeLine = writeLine
    }

    /// Writes each line to file descriptor 2 with one `write` call, so lines from different threads do not
    /// interleave.
    public static let standardError = LogSink { line in writeToStandardError(line) }

    /// Writes `line`.
    public func write(_ line: String) {
        writeLine(line)
    }
}

/// Writes all of `line` to file descriptor 2, retrying partial writes and interruptions.
private func writeToStandardError(_ line: String) {
    var line = line
    line.withUTF8 { bytes in
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let written = write(2, base + offset, bytes.count - offset)
            if written > 0 {
                offset += written
            } else if written < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }
}

/// The shape of log lines: `text` for people (swift-log's `StreamLogHandler`), `json` for log shippers.
public enum LogFormat: String, Sendable, CaseIterable {
    case text
    case json
}

/// Builds the process's log handlers from the `log` configuration.
public enum LoggingBootstrap {
    /// A handler for `label` in `format` that writes `level` and above to `sink`.
    public static func makeHandler(
        label: String,
        format: LogFormat,
        level: Logger.Level,
        sink: LogSink = .standardError
    ) -> any LogHandler {
        switch format {
        case .json:
            return JSONLogHandler(label: label, level: level, sink: sink)
        case .text:
            var handler = StreamLogHandler(label: label, stream: SinkOutputStream(sink: sink))
            handler.logLevel = level
            return handler
        }
    }

    /// Installs ``makeHandler(label:format:level:sink:)`` as the process-wide logging backend, with the level
    /// read from `level` at every log call so a reload can change it. Call it once, from the executable, before
    /// the first `Logger` is made.
    public static func bootstrap(format: LogFormat, level: LogLevelControl) {
        LoggingSystem.bootstrap { label in
            LevelControlledHandler(inner: makeHandler(label: label, format: format, level: .trace), control: level)
        }
    }
}

/// The process's log level, changeable while it runs (`log.level` on a config reload).
public final class LogLevelControl: Sendable {
    private static let levels = Logger.Level.allCases
    private let index: Atomic<Int>

    public init(_ level: Logger.Level) {
        index = Atomic(Self.levels.firstIndex(of: level) ?? 2)
    }

    public var level: Logger.Level {
        get { Self.levels[index.load(ordering: .relaxed)] }
        set { index.store(Self.levels.firstIndex(of: newValue) ?? 2, ordering: .relaxed) }
    }
}

/// A handler whose level is the shared ``LogLevelControl``'s, whatever level each `Logger` copy was given.
struct LevelControlledHandler: LogHandler {
    var inner: any LogHandler
    let control: LogLevelControl

    var logLevel: Logger.Level {
        get { control.level }
        set {}
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        inner.log(event: event)
    }
}

/// Lets `StreamLogHandler` write to a ``LogSink``. It writes each line with one `write` call, so the sink
/// receives whole lines.
private struct SinkOutputStream: TextOutputStream, Sendable {
    let sink: LogSink

    mutating func write(_ string: String) {
        sink.write(string)
    }
}
