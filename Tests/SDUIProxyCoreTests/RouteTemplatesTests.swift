import Testing

@testable import SDUIProxyCore

/// `metrics.routes`: which label a request path counts under, and the templates the configuration refuses.
@Suite("route templates of the per-route metrics")
struct RouteTemplatesTests {
    let templates = RouteTemplates(["/screens/products/{id}", "/screens/home", "/screens/{name}", "/"])

    @Test(
        "the first template matching the whole path wins; other paths are other",
        arguments: [
            ("/screens/products/42", "/screens/products/{id}"), ("/screens/home", "/screens/home"),
            ("/screens/cart", "/screens/{name}"), ("/", "/"), ("/screens/products", "/screens/{name}"),
            ("/screens/products/42/reviews", "other"), ("/screens/products/", "other"), ("/screens", "other"),
            ("/screens//home", "other"), ("/screens/home/", "other"), ("", "other"), ("screens/home", "other"),
            ("/Screens/home", "other"),
        ]
    )
    func matching(path: String, label: String) {
        #expect(templates.labels[templates.index(of: path[...])] == label)
    }

    @Test("the labels are the templates in order, then other")
    func labels() {
        #expect(templates.labels == ["/screens/products/{id}", "/screens/home", "/screens/{name}", "/", "other"])
        #expect(RouteTemplates([]).index(of: "/anything") == 0)
    }

    @Test("the metrics section: templates parsed and printed; bad or repeated ones refused with the key")
    func configuration() throws {
        let loaded = try ConfigurationLoader().load(
            yaml:
                "upstream: { url: \"http://backend.test\" }\nmetrics: { routes: [\"/screens/products/{id}\", /screens/home] }\n"
        )
        #expect(loaded.metrics.routes == ["/screens/products/{id}", "/screens/home"])
        let printed = ConfigurationPrinter.yaml(loaded, adminTokenIsSet: false)
        #expect(try ConfigurationLoader().load(yaml: printed) == loaded)
        for bad in ["[screens]", "[\"/a/{id\"]", "[\"/a/x{id}\"]", "[\"/a?b=1\"]", "[/a, /a]"] {
            #expect(throws: ConfigurationError.self) {
                try ConfigurationLoader().load(
                    yaml: "upstream: { url: \"http://b.test\" }\nmetrics: { routes: \(bad) }\n"
                )
            }
        }
        #expect(throws: ConfigurationError.self) {
            try ConfigurationLoader().load(yaml: "upstream: { url: \"http://b.test\" }\nmetrics: { other: 1 }\n")
        }
    }
}
