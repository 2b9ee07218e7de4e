//go:build !linux

package pdeath

import "os/exec"

// setDeathSignal does nothing where the system has no parent-death signal:
// children outlive a parent that is killed.
func setDeathSignal(*exec.Cmd) {}
