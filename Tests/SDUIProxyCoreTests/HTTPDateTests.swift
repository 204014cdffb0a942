import SDUIProxyCore
import Testing

@Suite("HTTPDate")
struct HTTPDateTests {
    @Test("the three forms of RFC 9110 section 5.6.7 name the same instant")
    func forms() {
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == 784_111_777)
        // Month names in any case, as before the byte-wise reading of IMF-fixdate.
        #expect(HTTPDate.parse("Sun, 06 NOV 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sun, 06 nov 1994 08:49:37 GMT"[...]) == 784_111_777)
    }

    @Test(
        "what is not a date is nil",
        arguments: [
            "", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Nox 1994 08:49:37 GMT", "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 06 Nov 1994 08:49:61 GMT",
            "Sun, 06 Nov 1969 08:49:37 GMT", "Sun, 0x Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08-49-37 GMT",
            "0", "Sun, 06 Nov 19a4 08:49:37 GMT",
        ]
    )
    func invalid(_ text: String) {
        #expect(HTTPDate.parse(text) == nil)
    }

    @Test("format and parse are inverse over six decades, a leap second allowed")
    func roundTrip() {
        var seconds: Int64 = 0
        var count = 0
        while seconds < 2_000_000_000 {
            #expect(HTTPDate.parse(HTTPDate.format(seconds)) == seconds)
            seconds += 7_777_777 + Int64(count % 86_400)
            count += 1
        }
        #expect(count > 200)
        #expect(HTTPDate.parse("Wed, 31 Dec 2025 23:59:60 GMT") == HTTPDate.parse("Thu, 01 Jan 2026 00:00:00 GMT"))
    }

    @Test(
        "RFC 9110 §5.6.7: only the three forms exactly as written are dates",
        arguments: [
            "Thu, 18 Aug 50 02:01:18 GMT", "Thu 18 Aug 2050 02:01:18 GMT", "Thu,  18 Aug 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050  02:01:18 GMT", "Thu, 18 Aug 2050 02:01:18  GMT", "Thu, 18 Aug 2050 02:01:18 GMT ",
            " Thu, 18 Aug 2050 02:01:18 GMT", "18-Aug-2050", "Thu, 18 Aug 2050 2:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18 UTC", "0", "Thu, 18-Aug-2050 02:01:18 GMT", "Thursday, 18 Aug 2050 02:01:18 GMT",
            "Thu, 18-Aug-50 02:01:18 GMT", "Thursday, 18-Aug-2050 02:01:18 GMT", "Thu Aug 18 02:01:18 50",
            "Thu Aug 18 02:01:18 2050 GMT", "Thu Aug  18 02:01:18 2050", "Mon, 30 Feb 2026 00:00:00 GMT",
            "Tue, 31 Apr 2026 00:00:00 GMT", "Thu, 29 Feb 2100 00:00:00 GMT", "Xyz, 18 Aug 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18 GMTX",
        ]
    )
    func strictForms(_ text: String) {
        #expect(HTTPDate.parse(text) == nil, "\(text)")
    }

    @Test("RFC 9110 §5.6.7: names and GMT in any letter case, and a leap day where there is one")
    func lettersAndLeapDays() {
        let expected = HTTPDate.parse("Thu, 18 Aug 2050 02:01:18 GMT")
        #expect(expected != nil)
        #expect(HTTPDate.parse("Thu, 18 Aug 2050 02:01:18 gMT") == expected)
        #expect(HTTPDate.parse("THU, 18 AUG 2050 02:01:18 gmt") == expected)
        #expect(HTTPDate.parse("thursday, 18-aug-50 02:01:18 Gmt", currentYear: 2026) == expected)
        #expect(HTTPDate.parse("Thu Aug 18 02:01:18 2050") == expected)
        #expect(HTTPDate.parse("Tue, 29 Feb 2028 00:00:00 GMT") != nil)
        #expect(HTTPDate.parse("Tue, 29 Feb 2000 00:00:00 GMT") != nil)
    }

    @Test("RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is from the century before")
    func twoDigitYears() {
        #expect(
            HTTPDate.parse("Thursday, 18-Aug-50 02:01:18 GMT", currentYear: 2026)
                == HTTPDate.parse("Thu, 18 Aug 2050 02:01:18 GMT")
        )
        #expect(
            HTTPDate.parse("Wednesday, 18-Aug-99 02:01:18 GMT", currentYear: 2026)
                == HTTPDate.parse("Wed, 18 Aug 1999 02:01:18 GMT")
        )
        #expect(
            HTTPDate.parse("Friday, 18-Aug-76 02:01:18 GMT", currentYear: 2026)
                == HTTPDate.parse("Fri, 18 Aug 2076 02:01:18 GMT")
        )
        #expect(
            HTTPDate.parse("Saturday, 18-Aug-77 02:01:18 GMT", currentYear: 2026)
                == HTTPDate.parse("Sat, 18 Aug 1977 02:01:18 GMT")
        )
        #expect(
            HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT", currentYear: 2093)
                == HTTPDate.parse("Sun, 06 Nov 2094 08:49:37 GMT")
        )
    }
}
