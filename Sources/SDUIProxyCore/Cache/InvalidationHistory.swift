import NIOCore

/// The invalidations of the last while, numbered in the order they were applied, and the cache fills in flight
/// they may concern: the rule that keeps a fill from bringing back what a purge removed.
///
/// A fill asks the backend before an invalidation and gets its answer after it: what it brings may be the very
/// content the invalidation said had changed. So each fill notes the number of the last invalidation when it
/// starts (its ``Ticket``), and when its answer arrives the invalidations numbered after that decide what becomes
/// of it (``verdict(for:target:tags:)``): stored as it is, stored already stale as of a soft purge, or not stored
/// at all. The clients waiting on the fill asked before the invalidation and get its answer either way. A request
/// that finds a fill in flight may join it only when no invalidation since the fill started may reach its target
/// (``mayJoin(runStartedAfter:target:)``): it asked after the purge, and starts a fill of its own.
///
/// Tags are known only once an answer arrives, so an invalidation by tag may reach any fill in flight: it is
/// checked against the answer's tags, and no request joins a fill that started before it.
///
/// Bounded: records older than ``retention`` (longer than any fill takes) are forgotten when the next
/// invalidation comes, and at most ``maximumRecords`` are kept. A fill that started before a forgotten record
/// cannot be told whether that record reached it, and is not stored.
///
/// A value with no clock of its own: the caller passes the time and holds it under its lock.
public struct InvalidationHistory: Sendable {
    /// What a fill holds while it is in flight: its number, and the last invalidation's when it started.
    public struct Ticket: Sendable, Hashable {
        public let id: UInt64
        /// The number of the last invalidation recorded when the fill started (0 before any).
        public let sequence: UInt64
    }

    /// What becomes of a fill's answer.
    public enum Verdict: Sendable, Equatable {
        /// Stored as it is: no invalidation since the fill started reaches it.
        case store
        /// Stored already stale as of this instant, the first soft invalidation since the fill started that
        /// reaches it.
        case storeStale(asOf: NIODeadline)
        /// Not stored: a hard invalidation since the fill started reaches it, or one that might have was forgotten.
        case discard(reason: String)
    }

    private struct Record: Sendable {
        let sequence: UInt64
        let invalidation: CacheInvalidation
        let time: NIODeadline
    }

    /// Oldest first.
    private var records: [Record] = []
    /// The number of the last invalidation recorded.
    public private(set) var lastSequence: UInt64 = 0
    /// The number of the last invalidation forgotten: fills that started before it are not stored.
    private var forgottenThrough: UInt64 = 0
    /// The fills in flight: their targets, by ticket id.
    private var fillsInFlight: [UInt64: String] = [:]
    private var nextFillID: UInt64 = 0

    /// How long an invalidation is remembered: longer than a fill can take (`upstream.timeout` and the body's).
    public var retention: TimeAmount
    /// How many invalidations are remembered at most, however recent.
    public let maximumRecords: Int

    public init(retention: TimeAmount, maximumRecords: Int = 65_536) {
        precondition(maximumRecords > 0, "at least one record")
        self.retention = retention
        self.maximumRecords = maximumRecords
    }

    /// How many fills are in flight.
    public var fillCount: Int { fillsInFlight.count }

    /// Records `invalidation`, applied at `now`, and returns its number and how many fills in flight it reaches:
    /// those for a target it names, or under its prefix; for a tag, every fill in flight (their tags are checked
    /// when their answers arrive).
    public mutating func record(
        _ invalidation: CacheInvalidation,
        at now: NIODeadline
    ) -> (
        sequence: UInt64, fillsReached: Int
    ) {
        forget(before: now - retention, keepingAtMost: maximumRecords - 1)
        lastSequence += 1
        records.append(Record(sequence: lastSequence, invalidation: invalidation, time: now))
        let reached = fillsInFlight.values.reduce(0) { count, target in
            count + (invalidation.mayReach(target: target, tags: nil) ? 1 : 0)
        }
        return (lastSequence, reached)
    }

    /// Notes a fill of `target` starting now.
    public mutating func beginFill(target: String) -> Ticket {
        nextFillID &+= 1
        fillsInFlight[nextFillID] = target
        return Ticket(id: nextFillID, sequence: lastSequence)
    }

    /// Notes that the fill of `ticket` has ended, stored or not.
    public mutating func endFill(_ ticket: Ticket) {
        fillsInFlight.removeValue(forKey: ticket.id)
    }

    /// What becomes of the answer for `target`, carrying `tags`, of the fill that holds `ticket`.
    public func verdict(for ticket: Ticket, target: String, tags: [String]) -> Verdict {
        verdict(since: ticket.sequence, target: target, tags: tags)
    }

    /// What becomes of an answer for `target`, carrying `tags`, asked for when `sequence` was the last
    /// invalidation's number.
    public func verdict(since sequence: UInt64, target: String, tags: [String]) -> Verdict {
        guard sequence < lastSequence else { return .store }
        guard sequence >= forgottenThrough else {
            return .discard(reason: "the fill outlasted the record of invalidations made while it ran")
        }
        var staleAsOf: NIODeadline?
        for record in records.reversed() {
            guard record.sequence > sequence else { break }
            guard record.invalidation.mayReach(target: target, tags: tags) else { continue }
            guard record.invalidation.soft else {
                return .discard(reason: "invalidated while in flight (\(record.invalidation))")
            }
            staleAsOf = record.time
        }
        return staleAsOf.map { .storeStale(asOf: $0) } ?? .store
    }

    /// Whether a request for `target` may join a fill that started when `sequence` was the last invalidation's
    /// number: no invalidation since may reach it (an invalidation by tag may reach any).
    public func mayJoin(runStartedAfter sequence: UInt64, target: String) -> Bool {
        guard sequence < lastSequence else { return true }
        guard sequence >= forgottenThrough else { return false }
        for record in records.reversed() {
            guard record.sequence > sequence else { break }
            if record.invalidation.mayReach(target: target, tags: nil) { return false }
        }
        return true
    }

    /// Forgets the records made before `cutoff`, and the oldest past `count`.
    private mutating func forget(before cutoff: NIODeadline, keepingAtMost count: Int) {
        var dropped = 0
        while dropped < records.count, records[dropped].time < cutoff || records.count - dropped > count {
            dropped += 1
        }
        guard dropped > 0 else { return }
        forgottenThrough = records[dropped - 1].sequence
        records.removeFirst(dropped)
    }
}

extension CacheInvalidation {
    /// Whether it reaches a response for `target` that carries `tags`; with `tags` nil (an answer not yet
    /// arrived), whether it may.
    public func mayReach(target: String, tags: [String]?) -> Bool {
        switch scope {
        case .targets(let targets): targets.contains(target)
        case .prefix(let prefix): PathPrefix(prefix).matches(target)
        case .tag(let tag): tags?.contains(tag) ?? true
        case .all: true
        }
    }
}
