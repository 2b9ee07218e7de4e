package testenv

import (
	"testing"
	"time"
)

// The pull line is issue 26's contract, parsed by outside checks; the push
// line differs only by its mode field.
func TestFleetLine(t *testing.T) {
	l := FleetLine{Clusters: 1000, Replicas: 3, RSSKiB: 392.34, CPUMs: 1.376, Reconnect: 1500 * time.Millisecond,
		Instantiate: 5800 * time.Millisecond, SummaryP50: 11500 * time.Microsecond, AllP50: 18800 * time.Microsecond,
		CbP50: 669 * time.Millisecond, CbP99: 2400 * time.Millisecond, EtcdKeys: 5.2, EtcdBytes: 2958, Lost: 0}
	want := "fleet: clusters=1000 replicas=3 rss_kib_per_cluster=392.3 cpu_ms_per_min_per_cluster=1.38 reconnect_s=1.5 " +
		"instantiate_s=5.8 status_summary_p50_ms=11.5 status_all_p50_ms=18.8 callback_p50_ms=669.0 callback_p99_ms=2400.0 " +
		"etcd_keys_per_change=5.2 etcd_bytes_per_change=2958 lost=0"
	if got := l.String(); got != want {
		t.Errorf("pull line\n got %s\nwant %s", got, want)
	}
	l.Mode = "push"
	if got := l.String(); got != "fleet: mode=push "+want[len("fleet: "):] {
		t.Errorf("push line: %s", got)
	}
	// Measured, the settled memory comes before lost, the last field.
	l.Mode, l.SettledRSSKiB = "", 201.26
	if got, want := l.String(), want[:len(want)-len("lost=0")]+"rss_settled_kib_per_cluster=201.3 lost=0"; got != want {
		t.Errorf("with settled memory\n got %s\nwant %s", got, want)
	}
}
