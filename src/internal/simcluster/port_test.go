package simcluster

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A port taken by someone else between choosing and binding is avoided:
// the API server fails to bind, and the cluster starts on another port.
// (External tests share one cluster set; this internal one starts its own.)
func TestBusyPortIsAvoided(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	calls := 0
	pick := func() (int, error) {
		calls++
		if calls == 1 {
			return busyPort, nil
		}
		return freePort()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	set, err := Start(ctx, Options{Clusters: 1, Nodes: 1, Dir: t.TempDir(), pickPort: pick})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Stop()
	if calls < 2 || strings.HasSuffix(set.Clusters[0].Server, ":"+strconv.Itoa(busyPort)) {
		t.Fatalf("cluster on %s after %d picks; the busy port was %d", set.Clusters[0].Server, calls, busyPort)
	}
}
