#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP port on 127.0.0.1 bound but not listened on. Connecting to it is refused, as to a stopped server,
/// and while it is held the kernel gives the port to no other socket: a server binding port 0 or a client
/// connecting out cannot take it. Without it, a test that stops its origin and starts it again later can
/// find another test's server answering on that port in between.
///
/// It binds with `SO_REUSEADDR` and `SO_REUSEPORT`, so it can be taken while the origin (which sets both)
/// still listens, and the origin can listen again before it is given up: the port is never free in between.
final class PortReservation: Sendable {
    struct Failure: Error, CustomStringConvertible {
        var call: String
        var code: CInt
        var description: String { "\(call) failed: \(String(cString: strerror(code)))" }
    }

    private let descriptor: CInt

    init(port: Int) throws {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, CInt(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw Failure(call: "socket", code: errno) }
        var on: CInt = 1
        for option in [SO_REUSEADDR, SO_REUSEPORT] {
            setsockopt(descriptor, SOL_SOCKET, option, &on, socklen_t(MemoryLayout<CInt>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else {
            let code = errno
            close(descriptor)
            throw Failure(call: "bind to port \(port)", code: code)
        }
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }
}
