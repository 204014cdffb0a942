import Foundation
import SDUIProxyCore

/// Locates the test data, all of it inside the repository: the Beagle fixtures in `Tests/Fixtures/beagle/` and
/// the sample screens in `config/samples/screens/`.
///
/// Nothing here reads a file before a test asks for it, and a file that is missing or unreadable is an error
/// that names its path, thrown into the one test that reads it.
enum Fixtures {
    /// Why a fixture could not be read.
    enum Failure: Error, Equatable, CustomStringConvertible {
        /// The name is not a plain file name (it has a `/` or starts with `.`), so it could lead out of the directory.
        case invalidName(String)
        /// No file at this path.
        case missing(path: String)
        /// The file exists but could not be read.
        case unreadable(path: String, reason: String)

        var description: String {
            switch self {
            case .invalidName(let name): "not a fixture file name: \(name)"
            case .missing(let path): "no fixture file at \(path)"
            case .unreadable(let path, let reason): "cannot read \(path): \(reason)"
            }
        }
    }

    /// The repository root: three directories up from `Tests/SDUIProxyCoreTests/Fixtures.swift`.
    static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()
        .deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The directory of the Beagle fixtures.
    static let beagleDirectory: URL = repositoryRoot.appendingPathComponent("Tests/Fixtures/beagle", isDirectory: true)

    /// The sample screens the bundled config serves.
    static let sampleScreensDirectory: URL = repositoryRoot.appendingPathComponent(
        "config/samples/screens",
        isDirectory: true
    )

    /// Every Beagle fixture, sorted; a test checks that the directory holds exactly these files.
    ///
    /// Components (`_beagleComponent_` at the root), actions (`_beagleAction_` at the root) and one array of
    /// actions. The routes that ask for prefetching are in `welcome-screen.json`, `catalog-list.json`,
    /// `push-view-custom-scheme.json` and `reset-stack-expression.json`; the other routes say
    /// `"shouldPrefetch": false` or nothing.
    static let beagleNames: [String] = [
        "account-screen.json",
        "actions-list.json",
        "alert.json",
        "button.json",
        "catalog-list.json",
        "condition.json",
        "confirm.json",
        "container-nested.json",
        "custom-widget.json",
        "empty-container.json",
        "grid-view.json",
        "lazy-component.json",
        "list-view-static.json",
        "open-native-route-deeplink.json",
        "open-native-route.json",
        "page-view-without-pages.json",
        "page-view.json",
        "pop-view.json",
        "pull-to-refresh.json",
        "push-stack-remote-route.json",
        "push-stack-with-context.json",
        "push-view-custom-scheme.json",
        "push-view-login-post.json",
        "reset-application.json",
        "reset-stack-expression.json",
        "scroll-view.json",
        "send-request.json",
        "set-context.json",
        "sign-up-form.json",
        "tab-bar.json",
        "text-input.json",
        "text.json",
        "touchable-details.json",
        "web-view.json",
        "welcome-screen.json",
    ]

    /// The URL of a Beagle fixture, like `welcome-screen.json`.
    static func url(_ name: String) throws(Failure) -> URL {
        guard !name.isEmpty, !name.hasPrefix("."), !name.contains("/") else { throw .invalidName(name) }
        return beagleDirectory.appendingPathComponent(name)
    }

    /// The bytes of a Beagle fixture.
    static func data(_ name: String) throws(Failure) -> Data {
        try read(url(name))
    }

    /// A Beagle fixture decoded as JSON by Foundation's decoder.
    static func json(_ name: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: data(name))
    }

    /// The bytes of a sample screen; `name` is relative to `config/samples/screens`, like `products/1.json`.
    static func sampleScreenData(_ name: String) throws(Failure) -> Data {
        guard !name.hasPrefix("/"), !name.split(separator: "/").contains(where: { $0.hasPrefix(".") }) else {
            throw .invalidName(name)
        }
        return try read(sampleScreensDirectory.appendingPathComponent(name))
    }

    /// The names of the JSON files the Beagle fixture directory holds, sorted.
    static func beagleDirectoryListing() throws(Failure) -> [String] {
        let path = beagleDirectory.path
        guard FileManager.default.fileExists(atPath: path) else { throw .missing(path: path) }
        do {
            return try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasSuffix(".json") }.sorted()
        } catch {
            throw .unreadable(path: path, reason: "\(error)")
        }
    }

    private static func read(_ url: URL) throws(Failure) -> Data {
        guard FileManager.default.fileExists(atPath: url.path) else { throw .missing(path: url.path) }
        do {
            return try Data(contentsOf: url)
        } catch {
            throw .unreadable(path: url.path, reason: "\(error)")
        }
    }
}
