import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

#if canImport(Glibc)
import Glibc
#endif

/// The admin listener's status page: one self-contained HTML page, loaded in a real browser (Debian's headless
/// Chromium) against a running proxy, whose script fills it from the admin endpoints.
@Suite("the admin status page")
struct StatusPageTests {
    static let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    @Test("GET / is one HTML page with no external assets, never cached or framed")
    func servedWhole() async throws {
        try await ProxyHarness.run { proxy in
            let page = try await proxy.admin("/")
            #expect(page.status == .ok)
            #expect(page["Content-Type"] == "text/html; charset=utf-8")
            #expect(page["Cache-Control"] == "no-store")
            #expect(page["Content-Security-Policy"]?.contains("connect-src 'self'") == true)
            #expect(page.body.hasPrefix("<!doctype html>"))
            for external in ["src=\"http", "href=\"http", "<link", "@import", "url("] {
                #expect(!page.body.contains(external), "\(external)")
            }
        }
    }

    @Test("behind the token, a browser is asked for it and the page loads with it")
    func behindTheToken() async throws {
        try await ProxyHarness.run(adminToken: "page-token") { proxy in
            let refused = try await proxy.admin("/")
            #expect(refused.status == .unauthorized)
            #expect(refused["WWW-Authenticate"]?.hasPrefix("Basic realm=") == true)
            let basic = "Basic " + Data("operator:page-token".utf8).base64EncodedString()
            #expect(try await proxy.admin("/", headers: [("Authorization", basic)]).status == .ok)
            #expect(try await proxy.admin("/cache/stats", headers: [("Authorization", basic)]).status == .ok)
        }
    }

    @Test(
        "headless Chromium loads the page against a running proxy, and its script fills every panel",
        .enabled(if: chromium != nil, "Debian's chromium is not installed (CI installs it)")
    )
    func loadsInABrowser() async throws {
        let chromium = try #require(Self.chromium)
        try await ProxyHarness.run(configure: {
            $0.metrics.routes = ["/screens/products/{id}", "/screens/home"]
        }) { proxy in
            for path in ["/screens/home", "/screens/home", "/screens/products/1", "/screens/products/1"] {
                _ = try await proxy.get(path)
            }
            let output = NSTemporaryDirectory() + "status-page-\(UUID().uuidString).html"
            defer { try? FileManager.default.removeItem(atPath: output) }
            // As root (CI) Chromium needs --no-sandbox; the virtual time lets the page's first refresh finish.
            let command =
                "exec '\(chromium)' --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="
                + "'\(NSTemporaryDirectory())chromium-\(UUID().uuidString)' --virtual-time-budget=5000 --dump-dom "
                + "'\(proxy.adminURL)/' > '\(output)'"
            let browser = try ChildProcess(
                executable: "/bin/sh",
                arguments: ["-c", command],
                directory: NSTemporaryDirectory(),
                environment: ProcessInfo.processInfo.environment
            )
            let deadline = ContinuousClock.now + .seconds(90)
            while browser.terminationStatus == nil {
                guard ContinuousClock.now < deadline else {
                    browser.signal(SIGKILL)
                    Issue.record("Chromium did not finish: \(browser.standardError.suffix(2000))")
                    return
                }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(browser.terminationStatus == 0, "\(browser.standardError.suffix(2000))")
            let dom = try String(contentsOfFile: output, encoding: .utf8)
            #expect(dom.contains(#"id="hit-ratio">50.0 %"#), "\(dom.prefix(3000))")
            #expect(dom.contains(#"id="updated">updated "#))
            #expect(dom.contains(#"id="error" class="bad"></span>"#), "the page's requests all succeeded")
            #expect(dom.contains("/screens/products/{id} · WEB"))
            #expect(dom.contains("single replica"))
        }
    }
}
