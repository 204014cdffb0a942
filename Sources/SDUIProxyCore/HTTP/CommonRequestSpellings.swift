import NIOHTTP1

/// The spellings nearly every request head repeats, a method and the field names clients send as a rule, handed
/// out as strings made once: a request head becomes `HTTPHeaders` and an `HTTPMethod`, made of strings, and
/// making each from its bytes (checked for UTF-8, then copied) cost about 180 instructions.
///
/// Only the exact spellings are known (`Host`, not `HOST`): anything else is made from its bytes, as before. A
/// name is told by its length first, then compared in place.
enum CommonRequestSpellings {
    /// The method `bytes` spell (a token, checked by the caller).
    @inline(__always)
    static func method(_ bytes: UnsafeRawBufferPointer) -> HTTPMethod {
        switch bytes.count {
        case 3:
            if spells(bytes, "GET") { return .GET }
            if spells(bytes, "PUT") { return .PUT }
        case 4:
            if spells(bytes, "HEAD") { return .HEAD }
            if spells(bytes, "POST") { return .POST }
        default:
            break
        }
        return HTTPMethod(rawValue: String(decoding: bytes, as: UTF8.self))
    }

    /// The field name `bytes` spell (a token, checked by the caller).
    @inline(__always)
    static func fieldName(_ bytes: UnsafeRawBufferPointer) -> String {
        knownFieldName(bytes) ?? String(decoding: bytes, as: UTF8.self)
    }

    /// One of the common field names, when `bytes` spell it exactly.
    static func knownFieldName(_ bytes: UnsafeRawBufferPointer) -> String? {
        switch bytes.count {
        case 4:
            if spells(bytes, "Host") { return "Host" }
        case 6:
            if spells(bytes, "Accept") { return "Accept" }
            if spells(bytes, "Cookie") { return "Cookie" }
            if spells(bytes, "Origin") { return "Origin" }
        case 7:
            if spells(bytes, "Referer") { return "Referer" }
        case 10:
            if spells(bytes, "User-Agent") { return "User-Agent" }
            if spells(bytes, "Connection") { return "Connection" }
        case 12:
            if spells(bytes, "Content-Type") { return "Content-Type" }
        case 13:
            if spells(bytes, "Cache-Control") { return "Cache-Control" }
            if spells(bytes, "Authorization") { return "Authorization" }
        case 14:
            if spells(bytes, "Content-Length") { return "Content-Length" }
        case 15:
            if spells(bytes, "Accept-Encoding") { return "Accept-Encoding" }
            if spells(bytes, "Accept-Language") { return "Accept-Language" }
        default:
            break
        }
        return nil
    }

    /// Whether `bytes` are `literal`'s bytes.
    @inline(__always)
    private static func spells(_ bytes: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        ByteSearch.same(bytes, literal.rawBytes)
    }
}
