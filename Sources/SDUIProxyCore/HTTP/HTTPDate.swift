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
    private static let dayNames = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]

    /// The current wall-clock time in seconds.
    public static func now() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec)
    }

    /// ``parse(_:currentYear:)`` for a value read in place.
    public static func parse(bytes: UnsafeRawBufferPointer) -> Int64? {
        parse(bytes.assumingMemoryBound(to: UInt8.self), currentYear: nil)
    }

    /// Parses an HTTP-date exactly as RFC 9110 section 5.6.7 writes its three forms: IMF-fixdate
    /// (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC 850 form (`Sunday, 06-Nov-94 08:49:37 GMT`) and
    /// asctime (`Sun Nov  6 08:49:37 1994`). Single spaces, two-digit time fields, a four-digit year (two in the
    /// RFC 850 form), a day that exists in its month; day names, month names and `GMT` in any letter case. Nil
    /// for anything else (an `Expires` that is nil here means "already expired").
    ///
    /// - Parameter currentYear: the year a two-digit RFC 850 year is read against (the current one when nil): one
    ///   that would be more than 50 years ahead is taken from the century before.
    public static func parse(_ text: some StringProtocol, currentYear: Int? = nil) -> Int64? {
        text.withContiguousUTF8 { parse($0, currentYear: currentYear) }
    }

    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>, currentYear: Int?) -> Int64? {
        var reader = DateReader(bytes: bytes)
        if bytes.count == 29 {
            // IMF-fixdate: what servers send, on every response.
            guard reader.dayName(long: false), reader.literal(","), reader.space(),
                let day = reader.digits(2), reader.space(), let month = reader.month(), reader.space(),
                let year = reader.digits(4), reader.space(), let time = reader.timeOfDay(), reader.space(),
                reader.gmt()
            else { return nil }
            return epochSeconds(year: year, month: month, day: day, time: time)
        }
        if bytes.count == 24 {
            // asctime: the day is two digits, or a space and one.
            guard reader.dayName(long: false), reader.space(), let month = reader.month(), reader.space(),
                let day = reader.digits(2) ?? (reader.space() ? reader.digits(1) : nil), reader.space(),
                let time = reader.timeOfDay(), reader.space(), let year = reader.digits(4), reader.atEnd
            else { return nil }
            return epochSeconds(year: year, month: month, day: day, time: time)
        }
        // RFC 850, with the long day name.
        guard reader.dayName(long: true), reader.literal(","), reader.space(), let day = reader.digits(2),
            reader.literal("-"), let month = reader.month(), reader.literal("-"), let shortYear = reader.digits(2),
            reader.space(), let time = reader.timeOfDay(), reader.space(), reader.gmt()
        else { return nil }
        let thisYear = currentYear ?? Int(civilDate(fromDays: now() / 86400).0)
        var year = thisYear - thisYear % 100 + shortYear
        if year > thisYear + 50 { year -= 100 }
        return epochSeconds(year: year, month: month, day: day, time: time)
    }

    /// Reads the parts of a date from left to right; each read moves past what it matched.
    private struct DateReader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        var atEnd: Bool { index == bytes.count }

        /// Three lower-case letters packed into one integer, as ``code()`` reads them.
        private static func pack(_ name: String) -> UInt32 {
            name.utf8.prefix(3).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        }

        private static let monthCodes = HTTPDate.monthNames.map(pack)
        private static let dayCodes = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"].map(pack)
        /// What follows the first three letters of each long day name.
        private static let longDayEndings = ["day", "sday", "nesday", "rsday", "day", "urday", "day"].map {
            Array($0.utf8)
        }
        private static let gmtCode = pack("gmt")

        /// The next three bytes in lower case, packed; nil when fewer are left. Moves past them.
        private mutating func code() -> UInt32? {
            guard index + 3 <= bytes.count else { return nil }
            var packed: UInt32 = 0
            for offset in 0..<3 { packed = packed << 8 | UInt32(lower(bytes[index + offset])) }
            index += 3
            return packed
        }

        private func lower(_ byte: UInt8) -> UInt8 {
            byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
        }

        mutating func dayName(long: Bool) -> Bool {
            guard let code = code(), let day = Self.dayCodes.firstIndex(of: code) else { return false }
            guard long else { return true }
            let ending = Self.longDayEndings[day]
            guard index + ending.count <= bytes.count,
                ending.indices.allSatisfy({ lower(bytes[index + $0]) == ending[$0] })
            else { return false }
            index += ending.count
            return true
        }

        /// 1 to 12.
        mutating func month() -> Int? {
            guard let code = code(), let month = Self.monthCodes.firstIndex(of: code) else { return nil }
            return month + 1
        }

        mutating func gmt() -> Bool { code() == Self.gmtCode && atEnd }

        mutating func literal(_ character: Unicode.Scalar) -> Bool {
            guard index < bytes.count, bytes[index] == UInt8(ascii: character) else { return false }
            index += 1
            return true
        }

        mutating func space() -> Bool { literal(" ") }

        /// Exactly `count` digits.
        mutating func digits(_ count: Int) -> Int? {
            guard index + count <= bytes.count else { return nil }
            var value = 0
            for offset in 0..<count {
                let digit = bytes[index + offset] &- UInt8(ascii: "0")
                guard digit < 10 else { return nil }
                value = value * 10 + Int(digit)
            }
            index += count
            return value
        }

        /// `HH:MM:SS`, as seconds into the day (a leap second allowed).
        mutating func timeOfDay() -> Int64? {
            guard let hour = digits(2), literal(":"), let minute = digits(2), literal(":"), let second = digits(2),
                hour < 24, minute < 60, second <= 60
            else { return nil }
            return Int64(hour * 3600 + minute * 60 + second)
        }
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

    private static func epochSeconds(year: Int, month: Int, day: Int, time: Int64) -> Int64? {
        guard (1970...9999).contains(year), day >= 1, day <= daysIn(month: month, year: year) else { return nil }
        return daysFromCivil(year: Int64(year), month: Int64(month), day: Int64(day)) * 86400 + time
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
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
