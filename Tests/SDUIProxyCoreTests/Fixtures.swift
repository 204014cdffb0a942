import Foundation
import SDUIProxyCore

/// Locates the shared test data: the Beagle iOS fixtures next to the repository
/// (`<repository>/../shared/fixtures/beagle-ios/`) and the sample screens in `<repository>/config/samples/`.
enum Fixtures {
    /// The repository root: three directories up from `Tests/SDUIProxyCoreTests/Fixtures.swift`.
    static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()
        .deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The directory of the Beagle iOS fixtures.
    static let beagleDirectory: URL =
        repositoryRoot
        .deletingLastPathComponent()
        .appendingPathComponent("shared/fixtures/beagle-ios", isDirectory: true)

    /// The sample screens the bundled config serves.
    static let sampleScreensDirectory: URL = repositoryRoot.appendingPathComponent(
        "config/samples/screens",
        isDirectory: true
    )

    /// The URL of a Beagle fixture, like `pushview.json`.
    static func url(_ name: String) -> URL {
        beagleDirectory.appendingPathComponent(name)
    }

    /// The bytes of a Beagle fixture.
    static func data(_ name: String) throws -> Data {
        try Data(contentsOf: url(name))
    }

    /// A Beagle fixture decoded as JSON, the way `ComponentDecoder.decodeJSON` decodes it.
    static func json(_ name: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: data(name))
    }

    /// The bytes of a sample screen; `name` is relative to `config/samples/screens`, like `products/1.json`.
    static func sampleScreenData(_ name: String) throws -> Data {
        try Data(contentsOf: sampleScreensDirectory.appendingPathComponent(name))
    }

    /// The names of every Beagle fixture that is a JSON file.
    static func beagleFixtureNames() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: beagleDirectory.path)
            .filter { $0.hasSuffix(".json") }
            .sorted()
    }
}
