import NIOCore
import SDUIProxyCore

/// The endpoints of the admin listener.
enum AdminEndpoints {
    static func router(for proxy: ProxyContext) -> AdminRouter {
        var router = AdminRouter()
        router.register(.GET, "/health") { _, eventLoop in
            eventLoop.makeSucceededFuture(AdminResponse(json: #"{"status":"ok"}"#))
        }
        return router
    }
}
