import Logging

extension ComponentFetcher.Request {
    /// The id the backend is sent this request with (`X-Request-Id`), for the lines logged about it.
    public var requestID: String? { upstream.fields.first("x-request-id") }

    /// This request as the waiters of a fill it leads name it.
    var leader: FillLeader { FillLeader(self) }

    /// `metadata` with the request's cache key and id: what every line about this fetch carries.
    func logMetadata(_ metadata: Logger.Metadata = [:]) -> Logger.Metadata {
        var metadata = metadata
        metadata["key"] = "\(key)"
        if let requestID { metadata["request_id"] = .string(requestID) }
        return metadata
    }
}
