package pdeath

import (
	"os/exec"
	"syscall"
)

// setDeathSignal gives cmd its own copy of its attributes (one shared
// between commands is left alone) with SIGKILL as the parent-death
// signal, unless the caller chose one (SIGTERM, for a child that cleans
// up after itself).
func setDeathSignal(cmd *exec.Cmd) {
	var a syscall.SysProcAttr
	if cmd.SysProcAttr != nil {
		a = *cmd.SysProcAttr
	}
	if a.Pdeathsig == 0 {
		a.Pdeathsig = syscall.SIGKILL
	}
	cmd.SysProcAttr = &a
}
