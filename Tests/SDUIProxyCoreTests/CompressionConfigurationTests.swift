import Testing

@testable import SDUIProxyCore

@Suite("The compression section: defaults, keys, environment, errors, and which types it takes")
struct CompressionConfigurationTests {
    private func load(
        _ yaml: String,
        environment: [String: String] = [:]
    ) throws(ConfigurationError) -> CompressionConfiguration {
        try SectionLoading.load(yaml, environment: environment).compression
    }

    private func error(_ yaml: String, environment: [String: String] = [:]) -> ConfigurationError? {
        SectionLoading.error(yaml, environment: environment)
    }

    @Test("without the section: br and gzip, from 256 bytes, for JSON, text, JavaScript and SVG")
    func defaults() throws {
        let compression = try load("")
        #expect(compression == CompressionConfiguration())
        #expect(compression.encodings == [.br, .gzip])
        #expect(compression.isEnabled)
        #expect(compression.minBytes == 256)
        #expect(compression.types == ["application/json", "+json", "text/", "application/javascript", "image/svg+xml"])
        #expect(compression.gzipLevel == 6)
        #expect(compression.brotliLevel == 5)
        #expect(!compression.eager)
        #expect(try load("compression: {}") == compression)
        #expect(compression.level(for: .br) == 5)
        #expect(compression.level(for: .gzip) == 6)
    }

    @Test("each key is read from the file")
    func keys() throws {
        let compression = try load(
            """
            compression:
              encodings: [gzip]
              minBytes: 1KiB
              types: [application/json, Text/]
              level: { gzip: 9, br: 11 }
              eager: true
            """
        )
        #expect(compression.eager)
        #expect(compression.encodings == [.gzip])
        #expect(compression.minBytes == 1024)
        #expect(compression.types == ["application/json", "text/"])
        #expect(compression.gzipLevel == 9)
        #expect(compression.brotliLevel == 11)
        #expect(try load("compression: { encodings: [gzip, br], minBytes: 0 }").encodings == [.gzip, .br])
        #expect(try load("compression: { minBytes: 0 }").minBytes == 0)
        // A string of comma-separated names is a list too, as the environment gives it.
        #expect(try load("compression: { encodings: \"gzip, br\" }").encodings == [.gzip, .br])
        #expect(try load("compression: { level: { br: 0 } }").brotliLevel == 0)
    }

    @Test("encodings: [] turns compression off")
    func off() throws {
        let compression = try load("compression: { encodings: [] }")
        #expect(compression.encodings.isEmpty)
        #expect(!compression.isEnabled)
    }

    @Test("the bundled config files show the defaults")
    func bundledFiles() throws {
        let root = "/" + String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        for file in ["config/sdui-proxy.yaml", "Docker/sdui-proxy-fleet.yaml"] {
            let configuration = try ConfigurationLoader().load(path: root + "/" + file)
            #expect(configuration.compression == CompressionConfiguration(), "\(file)")
        }
    }

    @Test("the environment overrides each key; a comma list, and an empty string for off")
    func environment() throws {
        let compression = try load(
            "compression: { encodings: [br], minBytes: 10 }",
            environment: [
                "SDUI_PROXY_COMPRESSION_ENCODINGS": "gzip, br",
                "SDUI_PROXY_COMPRESSION_MIN_BYTES": "2048",
                "SDUI_PROXY_COMPRESSION_TYPES": "application/json,+xml",
                "SDUI_PROXY_COMPRESSION_LEVEL_GZIP": "1",
                "SDUI_PROXY_COMPRESSION_LEVEL_BR": "4",
                "SDUI_PROXY_COMPRESSION_EAGER": "true",
            ]
        )
        #expect(compression.eager)
        #expect(compression.encodings == [.gzip, .br])
        #expect(compression.minBytes == 2048)
        #expect(compression.types == ["application/json", "+xml"])
        #expect(compression.gzipLevel == 1)
        #expect(compression.brotliLevel == 4)
        #expect(try load("", environment: ["SDUI_PROXY_COMPRESSION_ENCODINGS": ""]).encodings.isEmpty)
        #expect(try load("", environment: ["SDUI_PROXY_COMPRESSION_ENCODINGS": "[gzip]"]).encodings == [.gzip])
        #expect(try load("", environment: ["SDUI_PROXY_COMPRESSION_ENCODINGS": "br"]).encodings == [.br])
    }

    @Test(
        "bad values are refused, naming the key",
        arguments: [
            ("compression: { encodings: [deflate] }", "compression.encodings", "deflate is decoded, never stored"),
            ("compression: { encodings: [zstd] }", "compression.encodings", "\"zstd\" is not a coding"),
            ("compression: { encodings: [x-gzip] }", "compression.encodings", "not a coding"),
            ("compression: { encodings: [br, gzip, br] }", "compression.encodings", "br is listed twice"),
            ("compression: { eager: sometimes }", "compression.eager", "true or false"),
            ("compression: { encodings: [{ a: b }] }", "compression.encodings[0]", "expected a string"),
            ("compression: { minBytes: -1 }", "compression.minBytes", "expected a size"),
            ("compression: { minBytes: some }", "compression.minBytes", "expected a size"),
            ("compression: { types: [json] }", "compression.types", "\"json\" is not a media type"),
            ("compression: { types: [\"text/html; charset=utf-8\"] }", "compression.types", "not a media type"),
            ("compression: { types: [+] }", "compression.types", "not a media type"),
            ("compression: { types: [a/b/c] }", "compression.types", "not a media type"),
            ("compression: { level: { gzip: 0 } }", "compression.level.gzip", "out of range 1...9"),
            ("compression: { level: { gzip: 10 } }", "compression.level.gzip", "out of range 1...9"),
            ("compression: { level: { br: 12 } }", "compression.level.br", "out of range 0...11"),
            ("compression: { level: { zstd: 3 } }", "compression.level.zstd", "unknown key"),
            ("compression: { level: 5 }", "compression.level", "expected a mapping"),
            ("compression: { algorithms: [br] }", "compression.algorithms", "unknown key"),
        ]
    )
    func badValues(yaml: String, key: String, problem: String) {
        let failure = error(yaml)
        #expect(failure?.key == key, "\(yaml): \(String(describing: failure))")
        #expect(failure?.problem.contains(problem) == true, "\(String(describing: failure))")
    }

    @Test("a bad environment value names its variable")
    func badEnvironment() {
        let failure = error("", environment: ["SDUI_PROXY_COMPRESSION_ENCODINGS": "br,,gzip"])
        #expect(failure?.key == "compression.encodings")
        #expect(failure?.problem.contains("SDUI_PROXY_COMPRESSION_ENCODINGS") == true)
        let level = error("", environment: ["SDUI_PROXY_COMPRESSION_LEVEL_BR": "12"])
        #expect(level?.key == "compression.level.br")
    }

    @Test("printed, the section loads back to the same configuration")
    func printedRoundTrip() throws {
        var configuration = ProxyConfiguration()
        for compression in [
            CompressionConfiguration(),
            try load("compression: { encodings: [], minBytes: 0, types: [], level: { gzip: 1, br: 0 } }"),
            try load("compression: { encodings: [gzip], minBytes: 3000, types: [+json, text/], level: { br: 11 } }"),
        ] {
            configuration.compression = compression
            let printed = ConfigurationPrinter.yaml(configuration, adminTokenIsSet: false)
            #expect(try ConfigurationLoader().load(yaml: printed) == configuration, "\(printed)")
        }
    }

    @Test(
        "which content types are compressed",
        arguments: [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("  application/json  ;charset=utf-8", true),
            ("application/vnd.api+json", true),
            ("application/problem+JSON", true),
            ("text/html; charset=utf-8", true),
            ("text/plain", true),
            ("TEXT/CSS", true),
            ("application/javascript", true),
            ("image/svg+xml", true),
            ("image/png", false),
            ("application/octet-stream", false),
            ("application/jsonx", false),
            ("application/json-seq", false),
            ("application/+json", false),
            ("+json", false),
            ("text", false),
            ("texts/plain", false),
            ("", false),
            (";charset=utf-8", false),
            ("application/x-json+xml", false),
        ] as [(String, Bool)]
    )
    func compresses(contentType: String, expected: Bool) {
        #expect(CompressionConfiguration().compresses(contentType: contentType) == expected)
    }

    @Test("no content type is not compressed; an empty list of types compresses nothing")
    func compressesNothing() {
        #expect(!CompressionConfiguration().compresses(contentType: nil))
        var none = CompressionConfiguration()
        none.types = []
        #expect(!none.compresses(contentType: "application/json"))
        var exact = CompressionConfiguration()
        exact.types = ["Application/JSON"]
        #expect(exact.compresses(contentType: "application/json"))
        #expect(!exact.compresses(contentType: "application/vnd.api+json"))
    }
}
