import SDUIProxyCore

extension ContentCoder {
    /// Why a body could not be decoded.
    public enum DecodingError: Error, Equatable, Sendable, CustomStringConvertible {
        /// It decodes to more than the caller's limit; decoding stopped soon after passing it.
        case tooLarge
        /// It is not one whole stream of its coding: not that coding at all, cut short, or followed by other
        /// bytes. The text says which, for logs.
        case corrupt(String)

        public var description: String {
            switch self {
            case .tooLarge: "the decoded body is larger than the limit"
            case .corrupt(let reason): reason
            }
        }
    }

    /// Why a body could not be encoded: a level the coding does not have, or a library failure (memory).
    public struct EncodingError: Error, Equatable, Sendable, CustomStringConvertible {
        public var coding: ContentCoding
        public var reason: String

        public init(coding: ContentCoding, reason: String) {
            self.coding = coding
            self.reason = reason
        }

        public var description: String { "cannot encode as \(coding): \(reason)" }
    }
}
