//go:build !linux

package render

import "os/exec"

// Elsewhere than Linux workers are bounded by their heap watchdog alone.
func setProcAttrs(*exec.Cmd) {}

func limitAddressSpace(int, int64) error { return nil }

func preferOOMKill() {}
