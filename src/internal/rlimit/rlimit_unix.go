//go:build unix

package rlimit

import "syscall"

// RaiseNoFile raises the soft RLIMIT_NOFILE to the hard limit and returns
// the soft limit in force afterwards (the old one if raising failed).
// Go's runtime does the same for itself since 1.19; doing it here makes
// the value known, logged and used for the connection cap.
func RaiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= lim.Max {
		return uint64(lim.Cur), nil
	}
	raised := lim
	raised.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		return uint64(lim.Cur), err
	}
	return uint64(raised.Cur), nil
}
