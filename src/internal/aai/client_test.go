package aai

import (
	"encoding/json"
	"testing"

	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/status"
)

// A resource's identity is read back from its payload entry as the
// notifier writes it (after the JSON round trip of a frozen payload).
func TestKeyOfPayload(t *testing.T) {
	k := status.ResourceKey{App: "a", ClusterProvider: "cp", Cluster: "c1", Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "web"}
	data, err := json.Marshal(notify.DeletedPayload(k.String()))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if got := keyOfPayload(p); got != k {
		t.Fatalf("keyOfPayload = %+v, want %+v", got, k)
	}
}

// The mirroring workers' payloads keep the form of an instance
// subscription's without a name: a pending payload frozen by an earlier
// release is delivered unchanged.
func TestEnvelope(t *testing.T) {
	data, err := json.Marshal(envelope{InstanceID: "i", Ready: true})
	if err != nil || string(data) != `{"instance-id":"i","ready":true}` {
		t.Fatalf("envelope = %s, %v", data, err)
	}
}
