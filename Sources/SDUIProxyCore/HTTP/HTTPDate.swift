#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// HTTP dates (RFC 9110 section 5.6.7) as whole seconds since the Unix epoch.
public enum HTTPDate {
    private static let monthNames = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ]
    /// The month names' three lower-case letters, packed into one integer each.
    private static let monthCodes: [UInt32] = monthNames.map { name in
        name.utf8.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }
    private static let dayNames = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]

    /// The current wall-clock time in seconds.
    public static func now() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec)
    }

    /// ``parse(_:)`` for a value read in place: an IMF-fixdate is read without making a string.
    public static func parse(bytes: UnsafeRawBufferPointer) -> Int64? {
        parseFixdate(bytes.assumingMemoryBound(to: UInt8.self)) ?? parse(String(decoding: bytes, as: UTF8.self))
    }

    /// Parses IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC 850 form
    /// (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`). Nil for anything else.
    public static func parse(_ text: some StringProtocol) -> Int64? {
        // IMF-fixdate is what servers send (RFC 9110 section 5.6.7), on every response: read in place.
        if let seconds = text.withContiguousUTF8(parseFixdate) {
            return seconds
        }
        let fields = String(text).split(whereSeparator: { $0 == " " || $0 == "," || $0 == "-" }).map(String.init)
        // IMF-fixdate and RFC 850: weekday day month year time GMT
        if fields.count == 6, fields[5] == "GMT",
            let day = Int(fields[1]), let month = month(fields[2]), var year = Int(fields[3]),
            let time = timeOfDay(fields[4])
        {
            if fields[3].count == 2 { year += year < 70 ? 2000 : 1900 }
            return epochSeconds(year: year, month: month, day: day, time: time)
        }
        // asctime: weekday month day time year
        if fields.count == 5, let month = month(fields[1]), let day = Int(fields[2]),
            let time = timeOfDay(fields[3]), let year = Int(fields[4])
        {
            return epochSeconds(year: year, month: month, day: day, time: time)
        }
        return nil
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT`, byte by byte; nil for anything else (the general parser then decides).
    private static func parseFixdate(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == 0x20, bytes[7] == 0x20,
            bytes[11] == 0x20, bytes[16] == 0x20, bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"),
            bytes[25] == 0x20, bytes[26] == UInt8(ascii: "G"), bytes[27] == UInt8(ascii: "M"),
            bytes[28] == UInt8(ascii: "T")
        else { return nil }
        func number(_ start: Int, _ count: Int) -> Int? {
            var value = 0
            for index in start..<(start + count) {
                let digit = bytes[index] &- UInt8(ascii: "0")
                guard digit < 10 else { return nil }
                value = value * 10 + Int(digit)
            }
            return value
        }
        let monthCode = UInt32(bytes[8] | 0x20) << 16 | UInt32(bytes[9] | 0x20) << 8 | UInt32(bytes[10] | 0x20)
        guard let month = monthCodes.firstIndex(of: monthCode),
            let day = number(5, 2), let year = number(12, 4),
            let hour = number(17, 2), let minute = number(20, 2), let second = number(23, 2),
            hour < 24, minute < 60, second <= 60
        else { return nil }
        return epochSeconds(year: year, month: month + 1, day: day, time: Int64(hour * 3600 + minute * 60 + second))
    }

    /// Formats `seconds` as IMF-fixdate.
    public static func format(_ seconds: Int64) -> String {
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let secondOfDay = seconds - days * 86400
        let (year, month, day) = civilDate(fromDays: days)
        let weekday = dayNames[Int(((days % 7) + 7) % 7)]
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let monthName = monthNames[Int(month) - 1].prefix(1).uppercased() + monthNames[Int(month) - 1].dropFirst()
        return "\(weekday), \(two(day)) \(monthName) \(year) "
            + "\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60)) GMT"
    }

    private static func month(_ name: String) -> Int? {
        monthNames.firstIndex(of: name.lowercased()).map { $0 + 1 }
    }

    private static func timeOfDay(_ text: String) -> Int64? {
        let parts = text.split(separator: ":")
        guard parts.count == 3, let hour = Int64(parts[0]), let minute = Int64(parts[1]), let second = Int64(parts[2]),
            (0..<24).contains(hour), (0..<60).contains(minute), (0...60).contains(second)
        else { return nil }
        return hour * 3600 + minute * 60 + second
    }

    private static func epochSeconds(year: Int, month: Int, day: Int, time: Int64) -> Int64? {
        guard (1...31).contains(day), (1970...9999).contains(year) else { return nil }
        return daysFromCivil(year: Int64(year), month: Int64(month), day: Int64(day)) * 86400 + time
    }

    /// Howard Hinnant's days-from-civil algorithm.
    private static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    private static func civilDate(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let dayOfEra = z - era * 146097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthPrime = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthPrime + 2) / 5 + 1
        let month = monthPrime < 10 ? monthPrime + 3 : monthPrime - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
