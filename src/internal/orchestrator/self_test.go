package orchestrator

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/notify"
)

// Callbacks never reach this process, whatever --callback-allow says: not
// the embedded etcd's peer port, and not the API through the unspecified
// address (0.0.0.0:<api>, [::]:<api>), which connects to this host. Issue
// 23: with a broad --callback-allow, a callback to 0.0.0.0:<api> created a
// project through the API. Nothing is dialed.
func TestCallbacksNeverReachThePeerPortOrTheAPIByTheUnspecifiedAddress(t *testing.T) {
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	d, err := notify.NewDeliverer(notify.DelivererOptions{Allow: []string{"0.0.0.0/0", "::/0"}, Self: selfAddrs(env.Etcd, env.Mongo, api)})
	if err != nil {
		t.Fatal(err)
	}
	peers := env.Etcd.PeerEndpoints()
	if len(peers) == 0 {
		t.Fatal("the embedded etcd names no peer URL")
	}
	peer, err := url.Parse(peers[0])
	if err != nil {
		t.Fatal(err)
	}
	_, apiPort, _ := net.SplitHostPort(api.Addr().String())
	for _, target := range []string{
		"http://" + peer.Host + "/members",
		"http://127.0.0.2:" + peer.Port() + "/members",
		"http://0.0.0.0:" + apiPort + "/v2/projects",
		"http://[::]:" + apiPort + "/v2/projects",
		"http://0.0.0.0:" + peer.Port() + "/members",
	} {
		if err := d.CheckURL(context.Background(), target); err == nil || !strings.Contains(err.Error(), "the orchestrator's own address") {
			t.Errorf("%s: %v, want a refusal as the orchestrator's own address", target, err)
		}
	}
}
