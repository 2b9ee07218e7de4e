//go:build !linux

package render

// Elsewhere than Linux workers are bounded by their heap watchdog alone.
func limitAddressSpace(int, int64) error { return nil }

func preferOOMKill() {}
