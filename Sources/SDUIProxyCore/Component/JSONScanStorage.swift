/// The arrays a component scan fills (``JSONParser/scanObjects(_:keeping:reporting:maximumDepth:maximumCount:rootMember:storage:)``),
/// kept by a caller from one scan to the next so that a scan allocates nothing once they are large enough.
///
/// A scan made its three arrays and freed them again: three allocations, three frees and the arrays' releases,
/// about 1,200 instructions of every miss. A storage lends its arrays to a scan and takes them back, emptied but
/// with their room, when the scan has been read (``reclaim(_:)``). It holds at most ``maximumKeptCapacity``
/// elements' room an array: one hostile document with thousands of actions does not leave that much memory behind.
///
/// Not `Sendable`: a storage belongs to one thread at a time, as the scans it serves do.
public struct JSONScanStorage {
    var pending: [JSONParser.KeptMember] = []
    var kept: [JSONParser.KeptMember] = []
    var objects: [JSONParser.ScannedObject] = []

    /// The most elements an array keeps room for between scans; a larger one is let go.
    static let maximumKeptCapacity = 1_024

    /// Empty: the first scan it serves makes the arrays.
    public init() {}

    /// Takes back the arrays `scan` was made of, once it has been read, for the next scan.
    mutating func reclaim(_ scan: consuming JSONParser.Scan) {
        // Swapped out of the scan, which is the only other holder: emptied while nothing else holds them, they keep
        // their room rather than being copied.
        swap(&objects, &scan.objects)
        swap(&kept, &scan.members)
        if objects.capacity > Self.maximumKeptCapacity { objects = [] }
        if kept.capacity > Self.maximumKeptCapacity { kept = [] }
        if pending.capacity > Self.maximumKeptCapacity { pending = [] }
        objects.removeAll(keepingCapacity: true)
        kept.removeAll(keepingCapacity: true)
    }
}
