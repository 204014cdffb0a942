/// The arrays a component scan fills (``JSONParser/scanObjects(_:keeping:reporting:maximumDepth:maximumCount:rootMember:storage:)``),
/// kept by a caller from one scan to the next so that a scan allocates nothing once they are large enough.
///
/// A scan made its three arrays and freed them again: three allocations, three frees and the arrays' releases on
/// every stored component. A storage lends its arrays to a scan and takes them back, emptied but with their room:
/// a failed scan gives them back itself, a scan that succeeds when it has been read (``reclaim(_:)``). It keeps
/// at most ``maximumKeptCapacity`` elements' room an array (32 bytes an element, so about 96 KiB in all): one
/// hostile document with thousands of actions, finished or cut off, does not leave that much memory behind. It also
/// keeps what the last few prefetch URLs its scans' components declared resolved to (``ResolvedPrefetchURLs``).
///
/// Not `Sendable`: a storage belongs to one thread at a time, as the scans it serves do.
public struct JSONScanStorage {
    var pending: [JSONParser.KeptMember] = []
    var kept: [JSONParser.KeptMember] = []
    var objects: [JSONParser.ScannedObject] = []
    /// What the URLs the thread's components declared last resolved to, for the plans made from its scans.
    var resolvedURLs = ResolvedPrefetchURLs()

    /// The most elements an array keeps room for between scans; a larger one is let go.
    static let maximumKeptCapacity = 1_024

    /// Room for a typical screen's kept members and actions, so a scan's arrays do not grow by doubling. Sixteen
    /// members are 544 bytes; 32 were 1,056, past the 1,032 that malloc's per-thread cache serves, so each scan took
    /// two allocations through its shared bins.
    static let initialCapacity = 16

    /// Empty: the first scan it serves makes the arrays.
    public init() {}

    /// Hands the arrays to a scan's parser, whose empty ones it holds meanwhile: swapped, not copied, so the parser
    /// holds the only reference to each while it scans.
    mutating func lend(
        _ pending: inout [JSONParser.KeptMember],
        _ kept: inout [JSONParser.KeptMember],
        _ objects: inout [JSONParser.ScannedObject]
    ) {
        exchange(&pending, &kept, &objects)
        if pending.capacity < Self.initialCapacity { pending.reserveCapacity(Self.initialCapacity) }
        if kept.capacity < Self.initialCapacity { kept.reserveCapacity(Self.initialCapacity) }
        if objects.capacity < Self.initialCapacity { objects.reserveCapacity(Self.initialCapacity) }
    }

    /// Takes back all three arrays from a scan that failed, emptied.
    mutating func takeBack(
        _ pending: inout [JSONParser.KeptMember],
        _ kept: inout [JSONParser.KeptMember],
        _ objects: inout [JSONParser.ScannedObject]
    ) {
        exchange(&pending, &kept, &objects)
        Self.empty(&self.pending)
        Self.empty(&self.kept)
        Self.empty(&self.objects)
    }

    /// Takes back the pending members' array from a scan that succeeded; its others come with ``reclaim(_:)``.
    mutating func takeBack(pending: inout [JSONParser.KeptMember]) {
        swap(&pending, &self.pending)
        Self.empty(&self.pending)
    }

    /// Takes back the arrays `scan` was made of, once it has been read, for the next scan.
    mutating func reclaim(_ scan: consuming JSONParser.Scan) {
        // Swapped out of the scan, which is the only other holder: emptied while nothing else holds them, they keep
        // their room rather than being copied.
        swap(&objects, &scan.objects)
        swap(&kept, &scan.members)
        Self.empty(&objects)
        Self.empty(&kept)
    }

    /// Swaps the three arrays with the ones the storage holds.
    private mutating func exchange(
        _ pending: inout [JSONParser.KeptMember],
        _ kept: inout [JSONParser.KeptMember],
        _ objects: inout [JSONParser.ScannedObject]
    ) {
        swap(&pending, &self.pending)
        swap(&kept, &self.kept)
        swap(&objects, &self.objects)
    }

    /// Empties `array`, keeping its room unless that is more than ``maximumKeptCapacity`` elements'.
    private static func empty<Element>(_ array: inout [Element]) {
        if array.capacity > maximumKeptCapacity {
            array = []
        } else if !array.isEmpty {
            array.removeAll(keepingCapacity: true)
        }
    }
}
