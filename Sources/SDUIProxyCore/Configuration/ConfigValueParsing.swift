import NIOCore

/// Parsers for the human-friendly scalar values of the config file: sizes (`256MiB`) and durations (`250ms`).
public enum ConfigValueParsing {
    /// Parses a byte size: a whole number with an optional unit `B`, `KB`, `MB`, `GB` (powers of 1000) or
    /// `KiB`, `MiB`, `GiB` (powers of 1024). A plain number is bytes.
    public static func byteSize(_ text: String) -> Int? {
        let (number, unit) = splitNumber(text)
        guard let number, number >= 0 else { return nil }
        let multiplier: Int
        switch unit.lowercased() {
        case "", "b": multiplier = 1
        case "kb", "k": multiplier = 1000
        case "mb", "m": multiplier = 1_000_000
        case "gb", "g": multiplier = 1_000_000_000
        case "kib": multiplier = 1 << 10
        case "mib": multiplier = 1 << 20
        case "gib": multiplier = 1 << 30
        default: return nil
        }
        let (product, overflow) = number.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : product
    }

    /// The longest duration a setting may have: ten years. Longer ones are refused, so that no arithmetic on a
    /// duration (nanoseconds in an `Int64`, a deadline added to the clock) can overflow.
    public static let maximumDuration = Duration.seconds(3650 * 86400)

    /// Parses a duration: a whole number followed by `us` (or `µs`), `ms`, `s`, `m`, `h` or `d`. A bare `0` is zero. A number
    /// too large to count in seconds gives `Int64.max` seconds, which is past ``maximumDuration``.
    public static func duration(_ text: String) -> Duration? {
        let (number, unit) = splitNumber(text)
        guard let number, number >= 0 else { return nil }
        let secondsPerUnit: Int
        switch unit {
        // The micro sign (U+00B5) and the Greek letter mu (U+03BC) look alike; both are taken.
        case "us", "\u{B5}s", "\u{3BC}s": return .microseconds(number)
        case "ms": return .milliseconds(number)
        case "s": secondsPerUnit = 1
        case "m": secondsPerUnit = 60
        case "h": secondsPerUnit = 3600
        case "d": secondsPerUnit = 86400
        case "" where number == 0: return .zero
        default: return nil
        }
        let (seconds, overflow) = number.multipliedReportingOverflow(by: secondsPerUnit)
        return .seconds(overflow ? .max : seconds)
    }

    private static func splitNumber(_ text: String) -> (Int?, String) {
        let trimmed = text.trimmingWhitespace()
        let digits = trimmed.prefix { $0.isASCII && $0.isNumber }
        guard !digits.isEmpty, digits.count <= 18 else { return (nil, "") }
        let unit = trimmed.dropFirst(digits.count).trimmingWhitespace()
        return (Int(digits), unit)
    }
}

extension StringProtocol {
    /// The text without leading and trailing spaces and tabs.
    public func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}

extension Duration {
    /// The duration in whole seconds, rounded down.
    public var wholeSeconds: Int64 { components.seconds }

    /// The duration as a floating-point number of seconds.
    public var secondsValue: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// The duration as NIO's `TimeAmount`: whole nanoseconds, at most `Int64.max` of them.
    ///
    /// Reading a `Duration`'s components is 128-bit arithmetic, hundreds of instructions: code that runs per
    /// request keeps the `TimeAmount` instead of converting each time.
    public var timeAmount: TimeAmount {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow, seconds >= 0 else { return .nanoseconds(seconds < 0 ? 0 : .max) }
        let (total, carry) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        return .nanoseconds(carry ? .max : total)
    }
}
