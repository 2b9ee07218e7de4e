package loopback

import "testing"

func TestHostAndAddr(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.9.8.7": true, "::1": true, "::ffff:127.0.0.1": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "localhost.example": false, "example.com": false,
		"127.0.0.1.nip.io": false, "[::1]": false, "fe80::1%lo": false,
	} {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:6060": true, "localhost:0": true, "[::1]:6060": true,
		":6060": false, "0.0.0.0:6060": false, "127.0.0.1": false, "example.com:80": false,
	} {
		if got := Addr(addr); got != want {
			t.Errorf("Addr(%q) = %v, want %v", addr, got, want)
		}
	}
}
