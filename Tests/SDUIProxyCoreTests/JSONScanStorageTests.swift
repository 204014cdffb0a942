import Foundation
import NIOCore
import Testing

@testable import SDUIProxyCore

/// A scan's arrays lent by a ``JSONScanStorage`` and taken back: the same results as a scan that makes its own,
/// through failures in between, with the arrays' room kept and a hostile document's room let go.
@Suite("Component scans reusing their arrays")
struct JSONScanStorageTests {
    let decoder = ComponentDecoder()
    let planner: PrefetchPlanner

    init() throws {
        planner = PrefetchPlanner(upstream: try UpstreamOrigin(parsing: "http://localhost:8080"), allowedHosts: [])
    }

    /// A component with `count` prefetchable navigation actions to distinct screens.
    static func component(actions count: Int) -> ByteBuffer {
        let actions = (0..<count).map { index in
            #"{"_beagleAction_":"beagle:pushView","route":{"url":"/screens/s\#(index)","shouldPrefetch":true}}"#
        }
        return ByteBuffer(
            string: #"{"_beagleComponent_":"beagle:container","children":[\#(actions.joined(separator: ","))]}"#
        )
    }

    /// What the decoder says of `body`: its plan, or its failure's reason.
    func outcome(
        _ body: ByteBuffer,
        storage: inout JSONScanStorage
    ) -> Result<PrefetchPlanner.Plan, ComponentDecoder.Failure> {
        Result { () throws(ComponentDecoder.Failure) in
            try decoder.validateComponent(body, planningWith: planner, reusing: &storage)
        }
    }

    func freshOutcome(_ body: ByteBuffer) -> Result<PrefetchPlanner.Plan, ComponentDecoder.Failure> {
        Result { () throws(ComponentDecoder.Failure) in try decoder.validateComponent(body, planningWith: planner) }
    }

    @Test("one storage through every fixture, broken documents and non-components between, plans as fresh scans'")
    func reusedStorageMatchesFreshScans() throws {
        var bodies: [ByteBuffer] = []
        for name in Fixtures.beagleNames {
            let data = try Fixtures.data(name)
            bodies.append(ByteBuffer(bytes: data))
            // Cut inside an object: the scan fails with members of open objects pending.
            bodies.append(ByteBuffer(bytes: data.prefix(data.count * 2 / 3)))
        }
        bodies += [
            ByteBuffer(string: #"{"route":{"url":"/a","shouldPrefetch":true},"_beagleAction_":"beagle:pushView"}"#),
            Self.component(actions: 40),
            ByteBuffer(string: "[1, 2, 3]"),
            Self.component(actions: 3),
        ]
        var storage = JSONScanStorage()
        var failures = 0
        for body in bodies + bodies.reversed() {
            let reused = outcome(body, storage: &storage)
            let fresh = freshOutcome(body)
            switch (reused, fresh) {
            case (.success(let plan), .success(let expected)):
                #expect(plan == expected)
            case (.failure(let error), .failure(let expected)):
                #expect(error == expected)
                failures += 1
            default:
                Issue.record("reused storage: \(reused), fresh arrays: \(fresh)")
            }
            #expect(storage.pending.isEmpty && storage.kept.isEmpty && storage.objects.isEmpty)
            // Failed or not, the scan gave its arrays back with their room.
            #expect(storage.pending.capacity >= 16 && storage.kept.capacity >= 16 && storage.objects.capacity >= 16)
        }
        #expect(failures >= Fixtures.beagleNames.count * 2)
        #expect(try decoder.validateComponent(Self.component(actions: 3), planningWith: planner).targets.count == 3)
    }

    @Test("a storage keeps its arrays from one scan to the next")
    func arraysAreReused() throws {
        var storage = JSONScanStorage()
        _ = try decoder.validateComponent(Self.component(actions: 5), planningWith: planner, reusing: &storage)
        #expect(storage.kept.capacity >= 16 && storage.objects.capacity >= 16 && storage.pending.capacity >= 16)
        let addresses = (
            storage.kept.withUnsafeBufferPointer { $0.baseAddress },
            storage.objects.withUnsafeBufferPointer { $0.baseAddress },
            storage.pending.withUnsafeBufferPointer { $0.baseAddress }
        )
        let plan = try decoder.validateComponent(Self.component(actions: 6), planningWith: planner, reusing: &storage)
        #expect(plan.targets.count == 6)
        #expect(storage.kept.withUnsafeBufferPointer { $0.baseAddress } == addresses.0)
        #expect(storage.objects.withUnsafeBufferPointer { $0.baseAddress } == addresses.1)
        #expect(storage.pending.withUnsafeBufferPointer { $0.baseAddress } == addresses.2)
    }

    @Test("a document with more actions than a storage keeps room for leaves no large arrays behind")
    func largeArraysAreLetGo() throws {
        var storage = JSONScanStorage()
        let count = JSONScanStorage.maximumKeptCapacity + 100
        let plan = try decoder.validateComponent(
            Self.component(actions: count),
            planningWith: planner,
            reusing: &storage
        )
        #expect(plan.targets.count == PrefetchPlanner.maximumTargets)
        #expect(storage.kept.capacity <= JSONScanStorage.maximumKeptCapacity)
        #expect(storage.objects.capacity <= JSONScanStorage.maximumKeptCapacity)
        #expect(storage.pending.capacity <= JSONScanStorage.maximumKeptCapacity)
        // And the storage still serves the next scan as a fresh one would.
        let next = Self.component(actions: 2)
        #expect(
            try decoder.validateComponent(next, planningWith: planner, reusing: &storage)
                == decoder.validateComponent(next, planningWith: planner)
        )
    }

    @Test("a document cut off inside an object with thousands of kept members leaves no large array behind")
    func failedScanLetsLargeArraysGo() throws {
        var storage = JSONScanStorage()
        // Members of an object still open when the document ends are pending when the scan fails.
        let members = String(repeating: #""url":"/a","#, count: JSONScanStorage.maximumKeptCapacity * 2)
        let body = ByteBuffer(string: #"{"_beagleComponent_":"beagle:container","route":{"# + members)
        switch (outcome(body, storage: &storage), freshOutcome(body)) {
        case (.failure(let error), .failure(let expected)): #expect(error == expected)
        case (let reused, let fresh): Issue.record("reused storage: \(reused), fresh arrays: \(fresh)")
        }
        #expect(storage.pending.isEmpty && storage.pending.capacity <= JSONScanStorage.maximumKeptCapacity)
        #expect(storage.kept.capacity <= JSONScanStorage.maximumKeptCapacity)
        #expect(storage.objects.capacity <= JSONScanStorage.maximumKeptCapacity)
        let next = Self.component(actions: 2)
        #expect(try outcome(next, storage: &storage).get() == freshOutcome(next).get())
    }
}
