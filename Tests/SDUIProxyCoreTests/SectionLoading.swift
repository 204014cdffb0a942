@testable import SDUIProxyCore

/// A config file for the tests of one section: the YAML given, after a backend (which every file must name).
enum SectionLoading {
    static func load(
        _ yaml: String,
        environment: [String: String] = [:]
    ) throws(ConfigurationError) -> ProxyConfiguration {
        let named = "upstream: { url: \"http://backend.test\" }\n" + yaml
        return try ConfigurationLoader(environment: environment).load(yaml: named)
    }

    /// The error loading `yaml` fails with; nil when it loads.
    static func error(_ yaml: String, environment: [String: String] = [:]) -> ConfigurationError? {
        do {
            _ = try load(yaml, environment: environment)
            return nil
        } catch {
            return error
        }
    }
}
