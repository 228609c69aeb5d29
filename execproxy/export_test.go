package execproxy

// MaxPending is maxPending, for the tests of the bridge's bounds.
const MaxPending = maxPending
