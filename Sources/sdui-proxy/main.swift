import ArgumentParser
import Logging
import SDUIProxy
import SDUIProxyCore
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `sdui-proxy` command: loads the configuration and runs the proxy until SIGTERM or SIGINT.
@main
struct SDUIProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sdui-proxy",
        abstract: "A caching reverse proxy for server-driven UI component backends."
    )

    @Option(name: .long, help: "The config file.")
    var config = "config/sdui-proxy.yaml"

    @Option(name: .long, help: "The public listener's port (overrides listen.port).")
    var port: Int?

    @Option(name: .long, help: "The backend URL, http(s)://... or file:DIRECTORY (overrides upstream.url).")
    var upstream: String?

    @Option(name: .customLong("admin-port"), help: "The admin listener's port (overrides admin.port).")
    var adminPort: Int?

    @Flag(name: .customLong("check-config"), help: "Validate the configuration and exit.")
    var checkConfig = false

    func run() async throws {
        let environment = ProcessEnvironment.variables()
        let loader = ConfigurationLoader(environment: environment)
        let path = config
        let overrides = CommandLineOverrides(port: port, adminPort: adminPort, upstream: upstream)
        let adminAuthorization = AdminAuthorization(environment: environment)
        let configuration: ProxyConfiguration
        do {
            configuration = try loader.load(path: path, overrides: overrides)
            try adminAuthorization.checkBinding(host: configuration.admin.host)
        } catch {
            FileHandleOutput.standardError("sdui-proxy: \(error)\n")
            throw ExitCode(2)
        }
        if checkConfig {
            print("sdui-proxy: \(config) is valid")
            return
        }

        let logLevel = LogLevelControl(Logger.Level(rawValue: configuration.log.level) ?? .info)
        LoggingBootstrap.bootstrap(format: LogFormat(rawValue: configuration.log.format) ?? .text, level: logLevel)
        let logger = Logger(label: "sdui-proxy")
        let service = ProxyService(
            configuration: configuration,
            logger: logger,
            adminAuthorization: adminAuthorization,
            reloadSource: { try loader.load(path: path, overrides: overrides) },
            logLevel: logLevel
        )
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: service)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        do {
            try await group.run()
        } catch {
            logger.critical("sdui-proxy stopped with an error", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
    }
}

/// Reads the process environment without Foundation.
enum ProcessEnvironment {
    static func variables() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }
}

enum FileHandleOutput {
    static func standardError(_ text: String) {
        var text = text
        text.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
    }
}
