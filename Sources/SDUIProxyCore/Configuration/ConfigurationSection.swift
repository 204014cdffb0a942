import Yams

/// Reads one mapping of the config file with the environment laid over it, and reports any problem with the
/// full key path.
///
/// For a key `cache.maxBytes` the environment variable `SDUI_PROXY_CACHE_MAX_BYTES`, when set, replaces
/// the file's value; its text is read as YAML, so lists can be given as `[a, b]`.
struct ConfigurationSection {
    let path: [String]
    let mapping: [String: Node]
    let environment: [String: String]
    /// Every environment variable name this load consulted, so unknown `SDUI_PROXY_` variables can be reported.
    let consultedVariables: VariableLog

    final class VariableLog {
        var names: Set<String> = []
    }

    init(path: [String], node: Node?, environment: [String: String], log: VariableLog) throws(ConfigurationError) {
        self.path = path
        self.environment = environment
        self.consultedVariables = log
        let name = path.isEmpty ? "(top level)" : path.joined(separator: ".")
        switch node {
        case nil:
            self.mapping = [:]
        case .mapping(let mapping)?:
            var entries: [String: Node] = [:]
            for (key, value) in mapping {
                guard case .scalar(let scalar) = key else {
                    throw ConfigurationError(key: name, problem: "keys must be plain names")
                }
                guard entries[scalar.string] == nil else {
                    throw ConfigurationError(key: Self.join(path, scalar.string), problem: "key appears twice")
                }
                entries[scalar.string] = value
            }
            self.mapping = entries
        case .scalar(let scalar)? where scalar.string.isEmpty || scalar.tag.description.hasSuffix("null"):
            self.mapping = [:]
        case let other?:
            throw ConfigurationError(key: name, problem: "expected a mapping of keys, got \(Self.describe(other))")
        }
    }

    /// Fails when the section has a key outside `allowed`.
    func rejectUnknownKeys(_ allowed: Set<String>) throws(ConfigurationError) {
        for key in mapping.keys.sorted() where !allowed.contains(key) {
            let known = allowed.sorted().joined(separator: ", ")
            throw ConfigurationError(key: Self.join(path, key), problem: "unknown key (known keys here: \(known))")
        }
    }

    func section(_ key: String) throws(ConfigurationError) -> ConfigurationSection {
        try ConfigurationSection(
            path: path + [key],
            node: try value(key),
            environment: environment,
            log: consultedVariables
        )
    }

    // MARK: Typed values

    func string(_ key: String, default fallback: String) throws(ConfigurationError) -> String {
        guard let node = try value(key) else { return fallback }
        guard case .scalar(let scalar) = node else { throw mismatch(key, "a string", node) }
        return scalar.string
    }

    func int(_ key: String, default fallback: Int, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let node = try value(key) else { return fallback }
        guard let number = node.int else { throw mismatch(key, "a whole number", node) }
        guard range.contains(number) else {
            throw ConfigurationError(
                key: keyPath(key),
                problem: "\(number) is out of range \(range.lowerBound)...\(range.upperBound)\(origin(key))"
            )
        }
        return number
    }

    /// A whole number that may be left out: nil then, for a default that depends on other keys.
    func optionalInt(_ key: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int? {
        guard try value(key) != nil else { return nil }
        return try int(key, default: range.lowerBound, in: range)
    }

    func bool(_ key: String, default fallback: Bool) throws(ConfigurationError) -> Bool {
        guard let node = try value(key) else { return fallback }
        guard case .scalar = node, let flag = node.bool else { throw mismatch(key, "true or false", node) }
        return flag
    }

    func duration(_ key: String, default fallback: Duration) throws(ConfigurationError) -> Duration {
        guard let node = try value(key) else { return fallback }
        guard case .scalar(let scalar) = node, let parsed = ConfigValueParsing.duration(scalar.string) else {
            throw mismatch(key, "a duration like 250us, 250ms, 5s, 10m, 1h or 1d", node)
        }
        guard parsed <= ConfigValueParsing.maximumDuration else {
            throw ConfigurationError(key: keyPath(key), problem: "must be at most 3650d\(origin(key))")
        }
        return parsed
    }

    /// A duration that may be left out or say `unlimited`: nil then.
    func optionalDuration(_ key: String) throws(ConfigurationError) -> Duration? {
        guard let node = try value(key) else { return nil }
        if case .scalar(let scalar) = node, scalar.string == "unlimited" { return nil }
        return try duration(key, default: .zero)
    }

    /// A number between 0 and 1, like `0.1`.
    func fraction(_ key: String, default fallback: Double) throws(ConfigurationError) -> Double {
        guard let node = try value(key) else { return fallback }
        guard case .scalar(let scalar) = node, let number = Double(scalar.string), number.isFinite else {
            throw mismatch(key, "a number between 0 and 1", node)
        }
        guard (0...1).contains(number) else {
            throw ConfigurationError(key: keyPath(key), problem: "\(number) is not between 0 and 1\(origin(key))")
        }
        return number
    }

    func byteSize(_ key: String, default fallback: Int, minimum: Int = 0) throws(ConfigurationError) -> Int {
        guard let node = try value(key) else { return fallback }
        guard case .scalar(let scalar) = node, let parsed = ConfigValueParsing.byteSize(scalar.string) else {
            throw mismatch(key, "a size like 512KiB, 256MiB or 1GiB", node)
        }
        guard parsed >= minimum else {
            throw ConfigurationError(key: keyPath(key), problem: "must be at least \(minimum) bytes\(origin(key))")
        }
        return parsed
    }

    func stringList(_ key: String, default fallback: [String]) throws(ConfigurationError) -> [String] {
        guard let node = try value(key) else { return fallback }
        guard case .sequence(let sequence) = node else { throw mismatch(key, "a list", node) }
        var result: [String] = []
        for (index, element) in sequence.enumerated() {
            guard case .scalar(let scalar) = element else {
                throw ConfigurationError(
                    key: "\(keyPath(key))[\(index)]",
                    problem: "expected a string, got \(Self.describe(element))\(origin(key))"
                )
            }
            result.append(scalar.string)
        }
        return result
    }

    /// A list of strings that may also be written as one string of comma-separated entries (`br, gzip`), the
    /// way an environment variable says it most easily; an empty string is the empty list.
    func commaSeparatedList(_ key: String, default fallback: [String]) throws(ConfigurationError) -> [String] {
        guard let node = try value(key) else { return fallback }
        guard case .scalar(let scalar) = node else { return try stringList(key, default: fallback) }
        guard !scalar.string.trimmingWhitespace().isEmpty else { return [] }
        let entries = scalar.string.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingWhitespace()
        }
        guard !entries.contains(where: \.isEmpty) else { throw fail(key, "an entry is empty") }
        return entries
    }

    /// The raw sequence at `key`, each element as its own section (for lists of mappings).
    func sectionList(_ key: String) throws(ConfigurationError) -> [ConfigurationSection] {
        guard let node = try value(key) else { return [] }
        guard case .sequence(let sequence) = node else { throw mismatch(key, "a list", node) }
        var result: [ConfigurationSection] = []
        for (index, element) in sequence.enumerated() {
            result.append(
                try ConfigurationSection(
                    path: path + ["\(key)[\(index)]"],
                    node: element,
                    environment: environment,
                    log: consultedVariables
                )
            )
        }
        return result
    }

    /// The pairs of a mapping at `key`, in file order (for header lists).
    func orderedPairs(_ key: String) throws(ConfigurationError) -> [(String, String)]? {
        guard let node = try value(key) else { return nil }
        guard case .mapping(let mapping) = node else { throw mismatch(key, "a mapping of names to values", node) }
        var pairs: [(String, String)] = []
        for (name, value) in mapping {
            guard case .scalar(let nameScalar) = name, case .scalar(let valueScalar) = value else {
                throw ConfigurationError(key: keyPath(key), problem: "names and values must be strings\(origin(key))")
            }
            pairs.append((nameScalar.string, valueScalar.string))
        }
        return pairs
    }

    func keyPath(_ key: String) -> String { Self.join(path, key) }

    /// Whether the file or the environment gives `key` a value.
    func names(_ key: String) throws(ConfigurationError) -> Bool { try value(key) != nil }

    /// The environment variable that overrides `key` in this section.
    func environmentName(_ key: String) -> String {
        let parts = (path + [key]).map(Self.screamingSnakeCase)
        return "SDUI_PROXY_" + parts.joined(separator: "_")
    }

    func fail(_ key: String, _ problem: String) -> ConfigurationError {
        ConfigurationError(key: keyPath(key), problem: problem + origin(key))
    }

    // MARK: Private

    private func value(_ key: String) throws(ConfigurationError) -> Node? {
        let variable = environmentName(key)
        consultedVariables.names.insert(variable)
        if let text = environment[variable] {
            do {
                return try Yams.compose(yaml: text) ?? .scalar(.init(""))
            } catch {
                throw ConfigurationError(key: keyPath(key), problem: "\(variable) is not valid YAML: \(text)")
            }
        }
        return mapping[key]
    }

    private func origin(_ key: String) -> String {
        let variable = environmentName(key)
        if environment[variable] != nil { return " (from \(variable))" }
        if let line = mapping[key]?.mark?.line { return " (line \(line))" }
        return ""
    }

    private func mismatch(_ key: String, _ expected: String, _ node: Node) -> ConfigurationError {
        ConfigurationError(key: keyPath(key), problem: "expected \(expected), got \(Self.describe(node))\(origin(key))")
    }

    private static func describe(_ node: Node) -> String {
        switch node {
        case .scalar(let scalar): "\"\(scalar.string)\""
        case .mapping: "a mapping"
        case .sequence: "a list"
        case .alias: "an alias"
        }
    }

    private static func join(_ path: [String], _ key: String) -> String {
        (path + [key]).joined(separator: ".")
    }

    /// `maxBodyBytes` → `MAX_BODY_BYTES`. An acronym is one word, plural or not: `defaultTTL` → `DEFAULT_TTL`,
    /// `maxURLBytes` → `MAX_URL_BYTES`, `maxURLsPerRequest` → `MAX_URLS_PER_REQUEST`.
    private static func screamingSnakeCase(_ name: String) -> String {
        let characters = Array(name)
        var result = ""
        for (index, character) in characters.enumerated() {
            let previous = index > 0 ? characters[index - 1] : nil
            let next = index + 1 < characters.count ? characters[index + 1] : nil
            let afterNext = index + 2 < characters.count ? characters[index + 2] : nil
            if character.isUppercase, let previous {
                // A word starts after a lower-case letter or a digit, and at the last capital of an acronym that
                // a capitalised word follows (`URLBytes`), but not at one only a plural `s` follows (`URLs`).
                let endsAcronym =
                    previous.isUppercase && next?.isLowercase == true
                    && !(next == "s" && (afterNext == nil || afterNext?.isUppercase == true))
                if previous.isLowercase || previous.isNumber || endsAcronym { result += "_" }
            }
            if character.isLetter || character.isNumber { result += character.uppercased() } else { result += "_" }
        }
        return result
    }
}
