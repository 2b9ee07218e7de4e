package rlimit

import "testing"

func TestMaxConnections(t *testing.T) {
	for _, c := range []struct {
		requested int
		soft      uint64
		want      int
		lowered   bool
	}{
		{0, 1048576, 4096, false},
		{0, 20000, 4096, false},
		{0, 8192, 2048, false},
		{0, 1024, 256, false},
		{0, 0, 1024, false},
		{500, 1024, 500, false},
		{1000, 1024, 768, true},
		{100000, 20000, 19744, true},
		{5, 100, 5, false},
		{0, 2, 1, false},
		{7, 0, 7, false},
	} {
		got, lowered := MaxConnections(c.requested, c.soft)
		if got != c.want || lowered != c.lowered {
			t.Errorf("MaxConnections(%d, %d) = %d, %v; want %d, %v", c.requested, c.soft, got, lowered, c.want, c.lowered)
		}
	}
}
func TestMaxDeliveries(t *testing.T) {
	for _, c := range []struct {
		requested, listeners int
		soft                 uint64
		want                 int
		lowered              bool
	}{
		{0, 320, 1024, 176, false}, // 1,024 descriptors: API 256, gRPC 64
		{0, 5120, 1048576, 1024, false},
		{0, 0, 0, 256, false},
		{50, 320, 1024, 50, false},
		{2000, 320, 1024, 352, true},
		{0, 2000, 1024, 1, false},
		{7, 0, 0, 7, false},
	} {
		got, lowered := MaxDeliveries(c.requested, c.soft, c.listeners)
		if got != c.want || lowered != c.lowered {
			t.Errorf("MaxDeliveries(%d, %d, %d) = %d, %v; want %d, %v", c.requested, c.soft, c.listeners, got, lowered, c.want, c.lowered)
		}
	}
}
