import NIOCore
import NIOPosix
import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The part of a failure to reach the backend that a client may read.
///
/// Connection errors from NIO name the backend's address, its resolver results and library types
/// (`NIOConnectionError(host: ..., connectionErrors: [SingleConnectionFailure(target: [IPv4]10.0.0.7/...`).
/// Clients get the cause in a few words (`connection refused`); the full error goes to the log as the
/// ``ProxyError/detail``.
enum UpstreamFailureReason {
    /// A short, address-free reason for `error`, such as `connection refused`.
    static func reason(for error: any Error) -> String {
        switch error {
        case let error as NIOConnectionError:
            if let first = error.connectionErrors.first { return reason(for: first.error) }
            return "the backend's host name did not resolve"
        case let error as IOError:
            return reason(errno: error.errnoCode)
        case let error as NIOSSLError:
            guard case .handshakeFailed(let cause) = error else { return "TLS failed" }
            // BoringSSL names a certificate that did not verify this way.
            return "\(cause)".contains("CERTIFICATE_VERIFY_FAILED")
                ? "the backend's certificate is not trusted" : "TLS handshake failed"
        case let error as NIOSSLExtraError where error == .failedToValidateHostname:
            return "the backend's certificate is for another name"
        case let error as NIOSSLExtraError where error == .serverHostnameImpossibleToMatch:
            return "no certificate can name the backend's host (a host name with characters like _ cannot be)"
        case let error as ChannelError:
            switch error {
            case .connectTimeout: return "connecting timed out"
            case .eof, .ioOnClosedChannel, .alreadyClosed, .outputClosed, .inputClosed: return "connection closed"
            default: return "connection failed"
            }
        default:
            return "connection failed"
        }
    }

    private static func reason(errno code: Int32) -> String {
        switch code {
        case ECONNREFUSED: "connection refused"
        case ECONNRESET: "connection reset"
        case EPIPE: "connection closed"
        case ETIMEDOUT: "connection timed out"
        case EHOSTUNREACH: "host unreachable"
        case ENETUNREACH, ENETDOWN: "network unreachable"
        case EADDRNOTAVAIL, EADDRINUSE: "no local address available"
        case EMFILE, ENFILE: "out of file descriptors"
        default: "connection failed"
        }
    }
}
