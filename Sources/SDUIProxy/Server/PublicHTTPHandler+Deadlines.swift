import Logging
import NIOCore
import SDUIProxyCore

// The connection's deadlines: one scheduled wake-up for whichever of the state machine's deadlines comes first.
extension PublicHTTPHandler {

    /// Moves the wake-up earlier when the machine's deadline comes before it. Compares deadlines only: the
    /// scheduled task is touched (and retained) only when it moves.
    func updateWakeUp() {
        guard let at = machine.deadline?.at else { return }
        wakeUp(before: at)
    }

    /// Moves the wake-up to `at` when it is later.
    func wakeUp(before at: NIODeadline) {
        if let wakeUpAt, wakeUpAt <= at { return }
        guard let context else { return }
        scheduledWakeUp?.cancel()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        scheduledWakeUp = context.eventLoop.scheduleTask(deadline: at) { loopBound.value.wokeUp() }
        wakeUpAt = at
    }

    private func wokeUp() {
        scheduledWakeUp = nil
        wakeUpAt = nil
        guard let context else { return }
        switch machine.timerFired(now: clock.now) {
        case .none:
            updateWakeUp()
        case .closeIdle:
            proxy.logger.debug("closing an idle connection")
            context.close(promise: nil)
        case .requestTimedOut(let headArrived):
            var metadata: Logger.Metadata = ["client": "\(context.remoteAddress?.description ?? "?")"]
            if headArrived, let requestID = accessNotes?.requestID { metadata["request_id"] = .string(requestID) }
            proxy.logger.info("request timed out while being read", metadata: metadata)
            let error = ProxyError(.requestTimeout, "the request was not complete within limits.requestTimeout")
            interrupt(.answerAndClose(headArrived: headArrived), with: error, context: context)
        case .close:
            // The request's answer is out and its body still comes: close without resetting what was sent.
            context.closeAfterAnswer(lingering: machine.isDraining ? .whileDraining : .init())
        }
    }
}
