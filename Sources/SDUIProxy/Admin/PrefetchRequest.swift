import Foundation
import SDUIProxyCore

/// The body of `POST /prefetch`, read from JSON with messages that name the field and say what it should be,
/// as configuration errors do (`urls: expected a list of URLs, got a string`), never a decoder's own words.
///
/// Fields it does not know are ignored, as before; limits (how many URLs, which platforms) are the endpoint's.
struct PrefetchRequest: Equatable {
    var urls: [String]
    var platforms: [String]?
    var followActions: Int?
    var fleet: Bool?

    /// Reads `bytes`; throws a `badRequest` ``ProxyError`` whose message says what is wrong.
    static func parse(_ bytes: Data) throws(ProxyError) -> PrefetchRequest {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: bytes)
        } catch {
            throw ProxyError(.badRequest, #"the body is not valid JSON; expected {"urls": [...]}"#)
        }
        guard case .object(let fields) = value else {
            throw ProxyError(.badRequest, #"expected an object like {"urls": [...]}, got \#(value.description)"#)
        }
        guard let urls = fields["urls"] else {
            throw ProxyError(.badRequest, #"urls: missing; expected {"urls": [...]}"#)
        }
        return PrefetchRequest(
            urls: try strings(urls, field: "urls", expected: "a list of URLs", item: "a URL (a string)"),
            platforms: try fields["platforms"].flatMap { (value) throws(ProxyError) in
                value == .null
                    ? nil
                    : try strings(
                        value,
                        field: "platforms",
                        expected: "a list of platform names",
                        item: "a platform name (a string)"
                    )
            },
            followActions: try fields["followActions"].flatMap { (value) throws(ProxyError) -> Int? in
                switch value {
                case .null: return nil
                case .number(let number) where number == number.rounded() && abs(number) <= 1e9: return Int(number)
                default: throw mismatch("followActions", expected: "a whole number", got: value)
                }
            },
            fleet: try fields["fleet"].flatMap { (value) throws(ProxyError) -> Bool? in
                switch value {
                case .null: return nil
                case .bool(let flag): return flag
                default: throw mismatch("fleet", expected: "true or false", got: value)
                }
            }
        )
    }

    private static func strings(
        _ value: JSONValue,
        field: String,
        expected: String,
        item: String
    ) throws(ProxyError) -> [String] {
        guard case .array(let elements) = value else { throw mismatch(field, expected: expected, got: value) }
        var strings: [String] = []
        for (index, element) in elements.enumerated() {
            guard case .string(let text) = element else {
                throw mismatch("\(field)[\(index)]", expected: item, got: element)
            }
            strings.append(text)
        }
        return strings
    }

    private static func mismatch(_ field: String, expected: String, got value: JSONValue) -> ProxyError {
        ProxyError(.badRequest, "\(field): expected \(expected), got \(value.description)")
    }

    /// Any JSON value, decoded without a schema so that each field's type can be judged and named.
    enum JSONValue: Decodable, Equatable, CustomStringConvertible {
        case null
        case bool(Bool)
        case number(Double)
        case string(String)
        case array([JSONValue])
        case object([String: JSONValue])

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() {
                self = .null
            } else if let flag = try? container.decode(Bool.self) {
                self = .bool(flag)
            } else if let number = try? container.decode(Double.self) {
                self = .number(number)
            } else if let text = try? container.decode(String.self) {
                self = .string(text)
            } else if let elements = try? container.decode([JSONValue].self) {
                self = .array(elements)
            } else {
                self = .object(try container.decode([String: JSONValue].self))
            }
        }

        /// What it is, as an error message names it: `a string`, `a list`, `the number 3`.
        var description: String {
            switch self {
            case .null: "null"
            case .bool(let flag): "\(flag)"
            case .number(let number):
                number == number.rounded() && abs(number) < 1e15 ? "the number \(Int(number))" : "the number \(number)"
            case .string: "a string"
            case .array: "a list"
            case .object: "an object"
            }
        }
    }
}
