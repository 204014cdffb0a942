import NIOCore
import NIOPosix
import SDUIProxyCore

/// The per-route metrics of one configuration (`metrics.routes`): which series a request counts in, each event
/// loop's ``RouteTally`` (its thread's, found by a thread-specific slot: no lock another loop takes), and their
/// Prometheus text.
///
/// Labels are bounded by the configuration: `route` is a template or `other`, `platform` one of
/// `platform.allowed` (and the default platform) or `other`. A reload starts new counts (Prometheus reads the drop
/// as a counter reset).
final class RouteMetrics: Sendable {
    let templates: RouteTemplates
    let platformLabels: [String]
    /// Every thread's tally, for ``render()``: a reload makes new metrics, and each thread's next response starts a
    /// tally of theirs.
    private let tallies = ThreadTallies<RouteTally>(slot: threadTally)
    private static let threadTally = ThreadSpecificVariable<ThreadTallies<RouteTally>.Current>()

    /// The metrics of `configuration`, or nil when it lists no route templates.
    init?(_ configuration: ProxyConfiguration) {
        guard !configuration.metrics.routes.isEmpty else { return nil }
        templates = RouteTemplates(configuration.metrics.routes)
        var platforms = configuration.platform.allowed
        if !platforms.contains(configuration.platform.defaultValue) {
            platforms.append(configuration.platform.defaultValue)
        }
        platformLabels = platforms + [RouteTemplates.otherLabel]
    }

    /// The series a request for `path` (without query) on `platform` counts in.
    func series(path: Substring, platform: String) -> Int {
        // A few short names: compared in turn, cheaper than hashing the platform for a dictionary.
        let known = platformLabels.count - 1
        var platformNumber = known
        for index in 0..<known where platformLabels[index] == platform {
            platformNumber = index
            break
        }
        return templates.index(of: path) * platformLabels.count + platformNumber
    }

    /// The template of `series` (``series(path:platform:)``); nil for paths that match none (`other`).
    func template(ofSeries series: Int) -> String? {
        let index = series / platformLabels.count
        return index < templates.labels.count - 1 ? templates.labels[index] : nil
    }

    /// The tally the calling thread's responses are counted in (an event loop's thread counts in its own).
    func tally() -> RouteTally {
        tallies.current { RouteTally(seriesCount: templates.labels.count * platformLabels.count) }
    }

    /// `sdui_route_requests_total{route,platform,cache}`, `sdui_route_response_bytes_total{route,platform}` and the
    /// histogram `sdui_route_duration_seconds{route,platform}`, in the Prometheus text format, for the series that
    /// have counted a response.
    func render() -> String {
        let tallies = tallies.all
        let seriesCount = templates.labels.count * platformLabels.count
        func total(_ series: Int, _ slot: Int) -> Int {
            tallies.reduce(0) { $0 + $1.count(series: series, slot: slot) }
        }
        var requests = """
            # HELP sdui_route_requests_total Responses by route template, platform and how the cache took part.
            # TYPE sdui_route_requests_total counter

            """
        var bytes = """
            # HELP sdui_route_response_bytes_total Response body bytes sent, by route template and platform.
            # TYPE sdui_route_response_bytes_total counter

            """
        var durations = """
            # HELP sdui_route_duration_seconds From a request's head to its response's end, by route template and platform.
            # TYPE sdui_route_duration_seconds histogram

            """
        for series in 0..<seriesCount {
            let count = total(series, RouteTally.countSlot)
            guard count > 0 else { continue }
            let labels =
                #"route="\#(Self.escaped(templates.labels[series / platformLabels.count]))","#
                + #"platform="\#(Self.escaped(platformLabels[series % platformLabels.count]))""#
            for (index, cache) in RouteTally.cacheLabels.enumerated() {
                let value = total(series, index)
                if value > 0 { requests += "sdui_route_requests_total{\(labels),cache=\"\(cache)\"} \(value)\n" }
            }
            bytes += "sdui_route_response_bytes_total{\(labels)} \(total(series, RouteTally.bytesSlot))\n"
            var cumulative = 0
            for (index, bound) in RouteTally.bucketNanoseconds.enumerated() {
                cumulative += total(series, RouteTally.firstBucketSlot + index)
                let le = Double(bound) / 1e9
                durations += "sdui_route_duration_seconds_bucket{\(labels),le=\"\(le)\"} \(cumulative)\n"
            }
            durations += "sdui_route_duration_seconds_bucket{\(labels),le=\"+Inf\"} \(count)\n"
            durations +=
                "sdui_route_duration_seconds_sum{\(labels)} \(Double(total(series, RouteTally.sumSlot)) / 1e6)\n"
            durations += "sdui_route_duration_seconds_count{\(labels)} \(count)\n"
        }
        return requests + bytes + durations
    }

    /// A label value as the text format writes it: backslash, quote and newline escaped.
    static func escaped(_ value: String) -> String {
        var result = ""
        for character in value {
            switch character {
            case "\\": result += "\\\\"
            case "\"": result += "\\\""
            case "\n": result += "\\n"
            default: result.append(character)
            }
        }
        return result
    }
}
