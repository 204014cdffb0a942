import NIOPosix

extension ThreadSpecificVariable {
    /// The calling thread's value, made by `make` and kept for the thread the first time it asks.
    func currentValue(orMake make: () -> Value) -> Value {
        if let existing = currentValue { return existing }
        let value = make()
        currentValue = value
        return value
    }
}
