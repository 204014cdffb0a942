import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// AsyncHTTPClient's `ResponseAccumulator`, and for a cache fill the body's bytes taken from a ``ByteBudget``
/// while it is held (all at once when the head declares the length, part by part otherwise), and a body that
/// does not fit fails the request, as one over the accumulator's own limit does.
///
/// `@unchecked Sendable`: AsyncHTTPClient calls a delegate on its event loop, one call at a time, which is what
/// keeps `reserved` and `lengthDeclared` consistent (its own accumulator relies on the same).
final class BudgetedResponseAccumulator: HTTPClientResponseDelegate, @unchecked Sendable {
    typealias Response = HTTPClient.Response

    /// The failure when the body does not fit in the budget.
    struct OverBudget: Error {
        let limit: Int
    }

    private let accumulator: ResponseAccumulator
    /// Nil for an exchange that is not a fill: the accumulator's own limit alone applies.
    private let budget: ByteBudget?
    private var reserved = 0
    private var lengthDeclared = false
    /// A HEAD request's answer has no body, whatever length its head declares.
    private let isHEAD: Bool
    /// The exchange's time limits, told when the final head and each body part arrive.
    var deadlines: ExchangeDeadlines?

    init(request: HTTPClient.Request, maxBodySize: Int, budget: ByteBudget?) {
        self.accumulator = ResponseAccumulator(request: request, maxBodySize: maxBodySize)
        self.budget = budget
        self.isHEAD = request.method == .HEAD
    }

    func didSendRequestHead(task: HTTPClient.Task<Response>, _ head: HTTPRequestHead) {
        accumulator.didSendRequestHead(task: task, head)
    }

    func didSendRequestPart(task: HTTPClient.Task<Response>, _ part: IOData) {
        accumulator.didSendRequestPart(task: task, part)
    }

    func didSendRequest(task: HTTPClient.Task<Response>) {
        accumulator.didSendRequest(task: task)
    }

    func didVisitURL(task: HTTPClient.Task<Response>, _ request: HTTPClient.Request, _ head: HTTPResponseHead) {
        accumulator.didVisitURL(task: task, request, head)
    }

    func didReceiveHead(task: HTTPClient.Task<Response>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        if head.status.code >= 200 { deadlines?.headArrived() }
        // 1xx, 204 and 304 answers have no body either (RFC 9110 §6.4.1): a 304 may declare the length of the
        // representation it validates, which is not held.
        let hasBody = !isHEAD && head.status.code >= 200 && head.status != .noContent && head.status != .notModified
        if hasBody, let length = head.headers.first(name: "content-length").flatMap(Int.init), length > 0 {
            lengthDeclared = true
            // Over the accumulator's own limit it fails on its own, with its own error.
            if length <= accumulator.maxBodySize, let refusal = take(length, on: task.eventLoop) { return refusal }
        }
        return accumulator.didReceiveHead(task: task, head)
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Response>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        deadlines?.bodyPartArrived()
        if !lengthDeclared, let refusal = take(buffer.readableBytes, on: task.eventLoop) { return refusal }
        return accumulator.didReceiveBodyPart(task: task, buffer)
    }

    func didReceiveError(task: HTTPClient.Task<Response>, _ error: any Error) {
        giveBack()
        accumulator.didReceiveError(task: task, error)
    }

    func didFinishRequest(task: HTTPClient.Task<Response>) throws -> Response {
        // The body is the caller's from here on, stored or passed on within the same turn of the loop.
        defer { giveBack() }
        return try accumulator.didFinishRequest(task: task)
    }

    /// Takes `count` bytes from the budget; a failed future to fail the request with when they do not fit.
    private func take(_ count: Int, on eventLoop: any EventLoop) -> EventLoopFuture<Void>? {
        guard let budget else { return nil }
        guard budget.reserve(count) else { return eventLoop.makeFailedFuture(OverBudget(limit: budget.limit)) }
        reserved += count
        return nil
    }

    private func giveBack() {
        budget?.release(reserved)
        reserved = 0
    }
}
