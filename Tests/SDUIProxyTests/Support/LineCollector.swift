import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import SDUIProxy

/// Collects the lines a handler writes.
final class LineCollector: Sendable {
    private let box = NIOLockedValueBox<[String]>([])

    var sink: LogSink { LogSink { [box] line in box.withLockedValue { $0.append(line) } } }
    var lines: [String] { box.withLockedValue { $0 } }

    /// Each line parsed as a JSON object.
    func objects() throws -> [[String: Any]] {
        try lines.map { line in
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8))
            return try #require(object as? [String: Any])
        }
    }
}
