import Logging
import NIOCore
import SDUIProxyCore

// Creates and the writes that name their local identifiers, as deliveries see them.
extension QueueDeliveryService {
    /// What becomes of a claimed write that names creates.
    enum IdentifierMerge {
        /// Send it: the backend's identifiers are in place of the local ones, and the store holds it so.
        case send(QueueEntry)
        /// Nothing to send now: it ended `dependencyFailed`, or another deliverer has it.
        case settled
        /// The store could not be read or written: try again later.
        case storeFailed
    }

    /// Gives `entry` the backend identifiers of the creates it names, and stores it so before its first delivery
    /// (a restart or another replica sends the merged request, never the local one); or, when one of them failed,
    /// ends it `dependencyFailed` without sending it.
    func mergeIdentifiers(into entry: QueueEntry) async -> IdentifierMerge {
        let metadata: Logger.Metadata = ["id": "\(entry.id)", "route": "\(entry.route)"]
        let records: [String: LocalIdentifierRecord]
        do {
            records = try await queue.store.createRecords(ids: entry.dependsOn)
        } catch {
            logger.error(
                "cannot read the creates a queued write names",
                metadata: metadata.merging(["error": "\(error)"]) { $1 }
            )
            return .storeFailed
        }
        var mapping: [LocalIdentifier: RemoteIdentifier] = [:]
        for create in entry.dependsOn {
            guard let record = records[create] else {
                return await failDependent(
                    entry,
                    create: create,
                    reason: "its create \(create) is no longer in the queue"
                )
            }
            switch record.state {
            case .pending:
                // Claimed as its create was being taken over by another replica: it waits again.
                try? await queue.store.releaseClaims(ids: [entry.id])
                return .settled
            case .delivered(let remote?):
                mapping[record.local] = remote
            case .delivered(.none), .failed:
                let reason = "the create of \(record.local) (\(create)) failed: \(record.failure ?? "no reason given")"
                return await failDependent(entry, create: create, reason: reason)
            }
        }
        let local = UpstreamRequest(
            method: entry.method,
            target: entry.target,
            headers: entry.headers,
            body: entry.body
        )
        let merged = WriteQueue.merged(local, with: mapping, jsonBody: WriteQueue.jsonBody(of: local))
        let mergedHeaders = merged.headers
        do {
            guard
                try await queue.store.rewrite(
                    id: entry.id,
                    target: merged.target,
                    headers: mergedHeaders,
                    body: merged.body
                )
            else { return .settled }
        } catch {
            logger.error("cannot store a merged queued write", metadata: metadata.merging(["error": "\(error)"]) { $1 })
            return .storeFailed
        }
        queue.identifierMerges.add(1, ordering: .relaxed)
        logger.info(
            "gave a queued write the backend's identifiers in place of local ones",
            metadata: metadata.merging(["identifiers": "\(mapping.keys.map(\.value).sorted())"]) { $1 }
        )
        var sent = entry
        sent.target = merged.target
        sent.headers = mergedHeaders
        sent.body = merged.body
        sent.dependsOn = []
        return .send(sent)
    }

    /// Ends `entry` `dependencyFailed` because of `create`; its handlers run.
    private func failDependent(_ entry: QueueEntry, create: String, reason: String) async -> IdentifierMerge {
        let event = QueueOutcomeEvent(
            id: entry.id,
            route: entry.route,
            outcome: .dependencyFailed,
            status: nil,
            attempts: entry.attempts,
            error: reason,
            failedCreate: create
        )
        do {
            if try await queue.store.finish(
                id: entry.id,
                outcome: .dependencyFailed,
                lastError: reason,
                status: nil,
                attempts: entry.attempts,
                at: .now(),
                awaitingNotification: handlers?.awaitsNotification(event) ?? false,
                identifiers: QueueOutcomeIdentifiers(failedCreate: create)
            ) {
                queue.didFinish(route: entry.route)
                queue.dependencyFailures.add(1, ordering: .relaxed)
                logger.warning(
                    "a queued write was not sent: a create it names failed",
                    metadata: [
                        "id": "\(entry.id)", "route": "\(entry.route)", "create": "\(create)", "error": "\(reason)",
                    ]
                )
                handlers?.submit(event)
            }
            return .settled
        } catch {
            logger.error(
                "cannot record a queued write's outcome",
                metadata: ["id": "\(entry.id)", "error": "\(error)"]
            )
            return .storeFailed
        }
    }

    /// Tells the queue a create has its outcome: the writes that wait for it may go.
    func createFinished(
        _ entry: QueueEntry,
        local: LocalIdentifier,
        state: LocalIdentifierRecord.State,
        at time: QueueInstant
    ) {
        let record = LocalIdentifierRecord(local: local, create: entry.id, state: state, finishedAt: time)
        if case .delivered(.none) = state {
            logger.warning(
                "the backend's answer to a create named no identifier that can be used: the writes that name it will not be sent",
                metadata: ["id": "\(entry.id)", "route": "\(entry.route)", "localId": "\(local)"]
            )
        }
        queue.createFinished(record)
    }
}
