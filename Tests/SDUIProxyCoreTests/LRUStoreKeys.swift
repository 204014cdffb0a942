import SDUIProxyCore

// The stores the tests fill are keyed by plain values, found by their `hashValue`.
extension String: LRUStoreKey {}
extension Int: LRUStoreKey {}
