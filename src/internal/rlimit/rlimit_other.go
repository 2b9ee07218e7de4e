//go:build !unix

package rlimit

// RaiseNoFile does nothing where there is no RLIMIT_NOFILE; 0 means the
// limit is unknown.
func RaiseNoFile() (uint64, error) { return 0, nil }
