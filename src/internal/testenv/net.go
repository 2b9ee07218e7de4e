package testenv

import (
	"net"
	"testing"
)

// FreeAddr is a loopback address nothing listens on now: a port to serve
// on later, or one that refuses connections.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
