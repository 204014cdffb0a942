/// The decisions of `sdui-proxy health`: which address to ask, and whether the answer says the proxy is alive.
public enum HealthCheck {
    /// The path asked; it never needs the admin token.
    public static let path = "/health"

    /// The address to reach a listener bound to `host` from this machine: a wildcard address (`0.0.0.0`, `::`)
    /// is reached on the loopback address of its family; any other host as it is, without IPv6 brackets.
    public static func probeHost(forListenerHost host: String) -> String {
        switch host {
        case "0.0.0.0": return "127.0.0.1"
        case "::", "[::]": return "::1"
        default:
            if host.hasPrefix("[") && host.hasSuffix("]") { return String(host.dropFirst().dropLast()) }
            return host
        }
    }

    /// Why an answer with `status` and `body` does not say the proxy is alive, or nil when it does: status 200
    /// and a JSON object whose `status` is `"ok"`.
    public static func problem(status: Int, body: [UInt8]) -> String? {
        guard status == 200 else { return "\(path) answered status \(status)" }
        guard isAlive(body) else {
            let text = String(decoding: body.prefix(200), as: UTF8.self)
            let oneLine = text.split(whereSeparator: \.isNewline).joined(separator: " ")
            return "\(path) answered 200 without {\"status\":\"ok\"}: \(oneLine)"
        }
        return nil
    }

    private static let statusKeys = JSONParser.KeySet(["status"])

    /// Whether `body` is a JSON object whose `status` is the string `"ok"` (the last one, if it says it twice).
    private static func isAlive(_ body: [UInt8]) -> Bool {
        body.withUnsafeBytes { bytes in
            // The root is reported when it is an object with a string `status`; nothing deeper is looked at.
            guard
                let scan = try? JSONParser.scanObjects(
                    bytes,
                    keeping: statusKeys,
                    reporting: "status",
                    maximumDepth: 0,
                    maximumCount: 1
                ),
                let root = scan.objects.first, root.depth == 0,
                case .string(let status)? = scan.value(of: 0, in: root.members)
            else { return false }
            return JSONParser.text(of: status, in: bytes) == "ok"
        }
    }
}
