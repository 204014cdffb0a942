/// Metrics beyond the fixed ones (config key `metrics`).
public struct MetricsConfiguration: Sendable, Equatable {
    /// Path templates (`/screens/products/{id}`) whose requests are counted apart, each a `route` label value; a
    /// path that matches none counts under `other`. Empty: no per-route metrics, and nothing is matched.
    public var routes: [String] = []

    /// The most templates: each multiplies the series by the platforms and results.
    public static let maximumRoutes = 200

    public init() {}

    /// Reads the `metrics` section.
    static func parse(_ section: ConfigurationSection) throws(ConfigurationError) -> MetricsConfiguration {
        try section.rejectUnknownKeys(["routes"])
        var metrics = MetricsConfiguration()
        metrics.routes = try section.stringList("routes", default: [])
        guard metrics.routes.count <= maximumRoutes else {
            throw section.fail("routes", "lists \(metrics.routes.count) templates; at most \(maximumRoutes) are taken")
        }
        var seen: Set<String> = []
        for template in metrics.routes {
            if let problem = RouteTemplates.problem(with: template) { throw section.fail("routes", problem) }
            guard seen.insert(template).inserted else { throw section.fail("routes", "\(template) is listed twice") }
        }
        return metrics
    }
}
