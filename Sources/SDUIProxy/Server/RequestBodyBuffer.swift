import NIOCore
import NIOPosix
import SDUIProxyCore

/// Reads a forwarded request's body whole before it goes to the backend, so that a backend connection is taken
/// only for a request that is all there: a client that sends its body slowly holds a connection to the proxy, never
/// one to the backend.
///
/// The first `limits.requestBufferBytes` stay in memory; past that, everything is written to a
/// ``RequestSpoolFile`` as it arrives (in order, one write at a time, off the event loop). The client is asked to
/// pause while more than ``highWatermark`` bytes wait to be written, and to go on once under ``lowWatermark``.
///
/// Lives on the client connection's event loop; every method must be called there.
final class RequestBodyBuffer {
    /// What the body became once whole.
    enum Body {
        /// All of it, in memory.
        case whole(ByteBuffer)
        /// In this file, `length` bytes; the file is the receiver's to remove.
        case spooled(RequestSpoolFile, length: Int)
    }

    let highWatermark = 256 * 1024
    let lowWatermark = 64 * 1024

    private let eventLoop: any EventLoop
    private let memoryLimit: Int
    private let directory: String
    private let threadPool: NIOThreadPool

    /// The body while it fits in memory.
    private var memory = ByteBuffer()
    /// Set once the body outgrew memory: the file is being created, then written.
    private var spooling = false
    private var file: RequestSpoolFile?
    /// Parts waiting to be written, in order.
    private var pending: [ByteBuffer] = []
    /// Bytes taken but not written yet: pending, or being written.
    private var unwrittenBytes = 0
    /// Bytes written to the file so far: where the next write goes.
    private var writtenBytes = 0
    private var isWriting = false
    private var producerPaused = false
    private var onDemand: (() -> Void)?
    /// Why the body cannot be buffered (the file could not be created or written); parts after it are dropped.
    private var failure: (any Error)?
    /// Who is told once the last part is written, after ``finish(_:)``.
    private var onFinish: ((Result<Body, any Error>) -> Void)?
    private var isDiscarded = false

    /// - Parameters:
    ///   - memoryLimit: the most kept in memory (`limits.requestBufferBytes`).
    ///   - directory: where a larger body is written (`limits.requestBufferDirectory`).
    init(eventLoop: any EventLoop, memoryLimit: Int, directory: String, threadPool: NIOThreadPool) {
        self.eventLoop = eventLoop
        self.memoryLimit = memoryLimit
        self.directory = directory
        self.threadPool = threadPool
    }

    /// What to call when a paused client may be read again.
    func setDemandHandler(_ handler: @escaping () -> Void) {
        onDemand = handler
    }

    /// Takes a part of the body. Returns false when the client should pause until the demand handler is called.
    func append(_ part: ByteBuffer) -> Bool {
        guard failure == nil, !isDiscarded else { return true }
        if !spooling {
            if memory.readableBytes + part.readableBytes <= memoryLimit {
                var part = part
                memory.writeBuffer(&part)
                return true
            }
            startSpooling()
        }
        pending.append(part)
        unwrittenBytes += part.readableBytes
        writeNext()
        if unwrittenBytes > highWatermark {
            producerPaused = true
            return false
        }
        return true
    }

    /// The whole body has arrived: `completion` gets it, on the loop, once it is all in memory or on disk (at once
    /// for a body in memory), or the error that kept it from being buffered.
    func finish(_ completion: @escaping (Result<Body, any Error>) -> Void) {
        if let failure { return completion(.failure(failure)) }
        guard spooling else {
            let body = memory
            memory = ByteBuffer()
            return completion(.success(.whole(body)))
        }
        onFinish = completion
        completeIfWritten()
    }

    /// The request ended before its body was handed over (refused, timed out, the client went away): the memory is
    /// let go and the file, if any, removed (once a write in progress has ended).
    func discard() {
        isDiscarded = true
        onFinish = nil
        onDemand = nil
        memory = ByteBuffer()
        pending.removeAll()
        unwrittenBytes = 0
        if !isWriting, let file {
            self.file = nil
            file.remove(eventLoop: eventLoop)
        }
    }

    // MARK: Spooling

    private func startSpooling() {
        spooling = true
        if memory.readableBytes > 0 {
            pending.append(memory)
            unwrittenBytes += memory.readableBytes
            memory = ByteBuffer()
        }
        // Counts as a write in progress: nothing is written before the file is there.
        isWriting = true
        RequestSpoolFile.create(in: directory, threadPool: threadPool, eventLoop: eventLoop).assumeIsolated()
            .whenComplete { result in
                self.isWriting = false
                switch result {
                case .success(let file):
                    self.file = file
                    if self.isDiscarded { return self.discard() }
                    self.writeNext()
                case .failure(let error):
                    self.fail(error)
                }
            }
    }

    /// Writes what is pending, as one batch, unless a write is in progress (it writes the rest when it ends).
    private func writeNext() {
        guard !isWriting, let file, !pending.isEmpty else { return }
        let batch = pending
        pending.removeAll()
        let offset = writtenBytes
        let batchBytes = batch.reduce(0) { $0 + $1.readableBytes }
        isWriting = true
        file.write(batch, at: offset, eventLoop: eventLoop).assumeIsolated().whenComplete { result in
            self.isWriting = false
            if self.isDiscarded { return self.discard() }
            switch result {
            case .success:
                self.writtenBytes += batchBytes
                self.unwrittenBytes -= batchBytes
                if self.producerPaused, self.unwrittenBytes < self.lowWatermark {
                    self.producerPaused = false
                    self.onDemand?()
                }
                self.writeNext()
                self.completeIfWritten()
            case .failure(let error):
                self.fail(error)
            }
        }
    }

    private func completeIfWritten() {
        guard let onFinish, !isWriting, pending.isEmpty, let file else { return }
        self.onFinish = nil
        // The file is the receiver's from now on.
        self.file = nil
        onFinish(.success(.spooled(file, length: writtenBytes)))
    }

    /// The body cannot be buffered: what was written goes, and the rest of the body is read and dropped.
    private func fail(_ error: any Error) {
        failure = error
        pending.removeAll()
        unwrittenBytes = 0
        if let file {
            self.file = nil
            file.remove(eventLoop: eventLoop)
        }
        if producerPaused {
            producerPaused = false
            onDemand?()
        }
        if let onFinish {
            self.onFinish = nil
            onFinish(.failure(error))
        }
    }
}
