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
}
