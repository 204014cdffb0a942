import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization

/// A delivery's answer as the ``QueueDeliveryService`` reads it: the status, and for a create the head and the
/// first bytes of the body, where the backend names its identifier. The rest of the body is read past.
final class DeliveryAnswerSink: ForwardedResponseSink {
    /// How much of a create's answer is kept: an identifier is near the top of any sane answer, and a body cut here
    /// is not JSON (so names none) rather than half read.
    static let identifierBodyBytes = 64 * 1024

    let eventLoop: any EventLoop
    private let keepingBodyBytes: Int
    private let received = Mutex<Received>(Received())

    private struct Received {
        var status: HTTPResponseStatus?
        var headers = HTTPHeaders()
        var body: [UInt8] = []
        var bodyCut = false
    }

    /// Keeps the status and, when `keepingBodyBytes` is above 0, the headers and up to that many body bytes.
    init(eventLoop: any EventLoop, keepingBodyBytes: Int) {
        self.eventLoop = eventLoop
        self.keepingBodyBytes = keepingBodyBytes
    }

    var status: HTTPResponseStatus? { received.withLock { $0.status } }

    /// The backend's identifier for a create the answer delivered, where `rule` reads it; nil when it names none,
    /// or its body was longer than what is kept.
    func remoteIdentifier(by rule: CreateRule) -> RemoteIdentifier? {
        let (headers, body, cut) = received.withLock { ($0.headers, $0.body, $0.bodyCut) }
        return rule.remoteIdentifier(header: { headers.first(name: $0) }, body: cut ? [] : body)
    }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        let keep = keepingBodyBytes > 0
        received.withLock { answer in
            answer.status = status
            if keep { answer.headers = headers }
        }
    }

    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        if keepingBodyBytes > 0 {
            received.withLock { answer in
                guard !answer.bodyCut else { return }
                if answer.body.count + buffer.readableBytes > keepingBodyBytes {
                    answer.bodyCut = true
                    answer.body = []
                } else {
                    answer.body += buffer.readableBytesView
                }
            }
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    func receiveEnd() {}
}
