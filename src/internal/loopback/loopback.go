package loopback

import (
	"net"
	"net/netip"
	"strings"
)

// Host reports whether host (no port; an IPv6 literal without brackets,
// as url.URL.Hostname gives it) is "localhost" or a loopback IP.
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Addr reports whether a host:port address is on loopback.
func Addr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	return err == nil && Host(host)
}
