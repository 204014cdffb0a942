/// The version of sdui-proxy, as `sdui-proxy --version` prints it and the start-up log line carries it.
public enum SDUIProxyVersion {
    /// The release, `MAJOR.MINOR.PATCH`.
    public static let current = "0.9.0"
}
