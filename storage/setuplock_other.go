//go:build !unix

package storage

// lockSetup is a no-op where flock is not available: concurrent first opens of one state
// dir may meet SQLITE_BUSY there and are reported as such.
func lockSetup(string) (func(), error) { return func() {}, nil }
