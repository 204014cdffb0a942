import ArgumentParser
import Logging
import SDUIProxy
import SDUIProxyCore

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
        abstract: "A caching reverse proxy for server-driven UI component backends.",
        usage: """
            sdui-proxy [--config <file>] [--port <port>] [--admin-port <port>] [--upstream <url>]
            sdui-proxy --check-config | --print-config [--config <file>] [other flags]
            sdui-proxy health [--config <file>] [--admin-port <port>]
            """,
        discussion: """
            Configuration: the file config/sdui-proxy.yaml, relative to the working directory, unless --config \
            names another. Environment variables SDUI_PROXY_<KEY_PATH> override the file's keys \
            (cache.maxBytes: SDUI_PROXY_CACHE_MAX_BYTES), and the flags override both. --check-config runs every \
            check start-up runs but binding the ports; --print-config prints the configuration in force.

            Signals: SIGTERM and SIGINT stop accepting, let requests in flight finish (up to 10 s) and exit 0. \
            SIGHUP reloads the config file (same environment and flags); one that does not validate is refused \
            and the running configuration stays.

            Admin listener: 127.0.0.1:9090 by default (admin.host, admin.port, --admin-port), with /health, \
            /ready, /metrics, cache purges and the queue's status. With SDUI_PROXY_ADMIN_TOKEN set, every path \
            but /health and /ready (unless admin.probesOpen is false) needs "Authorization: Bearer <token>"; \
            without it, admin.host must be a loopback address. `sdui-proxy health` asks /health, for container \
            health checks.

            Exit status: 0 stopped by SIGTERM or SIGINT, or a check passed; 1 the proxy failed (a port in use, \
            the queue store held by another process); 2 the configuration is refused; 64 the command line is \
            wrong (an unknown flag, a missing or malformed value).
            """,
        version: SDUIProxyVersion.current,
        subcommands: [HealthCommand.self]
    )

    @OptionGroup var common: CommonOptions

    @Option(name: .long, help: "The public listener's port (overrides listen.port).")
    var port: Int?

    @Option(name: .long, help: "The backend URL, http(s)://... or file:DIRECTORY (overrides upstream.url).")
    var upstream: String?

    @Flag(
        name: .customLong("check-config"),
        help: "Check the configuration as start-up does, without binding the ports, and exit (0 valid, 2 not)."
    )
    var checkConfig = false

    @Flag(
        name: .customLong("print-config"),
        help: "Print the configuration in force (file, environment, flags) as YAML, secrets redacted, and exit."
    )
    var printConfig = false

    func run() async throws {
        let environment = ProcessEnvironment.variables()
        let loader = ConfigurationLoader(environment: environment)
        let path = common.config
        let overrides = CommandLineOverrides(port: port, adminPort: common.adminPort, upstream: upstream)
        let adminAuthorization = AdminAuthorization(environment: environment)
        let configuration: ProxyConfiguration
        do {
            configuration = try loader.load(path: path, overrides: overrides)
            if !printConfig || checkConfig {
                try StartupChecks.check(configuration, adminAuthorization: adminAuthorization)
            }
        } catch {
            FileHandleOutput.standardError("sdui-proxy: \(error)\n")
            throw ExitCode(2)
        }
        if printConfig {
            print(
                ConfigurationPrinter.yaml(configuration, adminTokenIsSet: adminAuthorization.requiresToken),
                terminator: ""
            )
            return
        }
        if checkConfig {
            print("sdui-proxy: \(path) is valid")
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
        do {
            // The proxy's services run in one group, which SIGTERM and SIGINT drain.
            try await service.run()
        } catch let error as ProxyStartupError {
            // It never served (a port in use, the queue store held): one line says why, as configuration errors do.
            FileHandleOutput.standardError("sdui-proxy: \(error)\n")
            throw ExitCode(1)
        } catch {
            logger.critical("sdui-proxy stopped with an error", metadata: ["error": "\(error)"])
            throw ExitCode(error is ConfigurationError ? 2 : 1)
        }
    }
}

/// The options the serving command and `health` share: both read the same configuration.
struct CommonOptions: ParsableArguments {
    @Option(name: .long, help: "The config file (relative paths are taken from the working directory).")
    var config = "config/sdui-proxy.yaml"

    @Option(name: .customLong("admin-port"), help: "The admin listener's port (overrides admin.port).")
    var adminPort: Int?
}

/// `sdui-proxy health`: asks the admin listener of the configured proxy whether it is alive.
struct HealthCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "health",
        abstract: "Ask the running proxy's admin listener for /health; exit 0 when it answers ok, 1 otherwise.",
        discussion: """
            Reads the same configuration as the proxy (--config, SDUI_PROXY_* variables, --admin-port) and asks \
            GET /health on admin.host:admin.port (0.0.0.0 and :: are asked on loopback), within 2 s. /health \
            needs no token, unless admin.probesOpen is false: then SDUI_PROXY_ADMIN_TOKEN is sent. On failure, \
            one line on standard error says why.
            """
    )

    @OptionGroup var common: CommonOptions

    @ParentCommand var serving: SDUIProxyCommand

    func validate() throws {
        // The serving command's other flags would otherwise be taken and ignored.
        let unused = serving.port != nil || serving.upstream != nil || serving.checkConfig || serving.printConfig
        if unused { throw ValidationError("health takes only --config and --admin-port") }
    }

    func run() async throws {
        let environment = ProcessEnvironment.variables()
        let configuration: ProxyConfiguration
        do {
            configuration = try ConfigurationLoader(environment: environment)
                .load(path: common.config, overrides: CommandLineOverrides(adminPort: common.adminPort))
        } catch {
            FileHandleOutput.standardError("sdui-proxy health: \(error)\n")
            throw ExitCode(1)
        }
        let admin = configuration.admin
        // With the probes closed (admin.probesOpen: false), /health needs the token too.
        let token = configuration.adminProbesOpen ? nil : environment[AdminAuthorization.tokenVariable]
        // A bearer token holds no whitespace: what is around it (a file's newline) is not part of it.
        let trimmed = token?.filter { !$0.isWhitespace }
        if let problem = await HealthProbe.run(
            host: admin.host,
            port: admin.port,
            timeout: .seconds(2),
            token: trimmed?.isEmpty == false ? trimmed : nil
        ) {
            FileHandleOutput.standardError("sdui-proxy health: \(problem)\n")
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
