package orchestrator

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/notify"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
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
	// An etcd embedded in this process, as local mode runs it (the
	// package's stores run in a process of their own).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcd, err := etcdstore.Open(ctx, etcdstore.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	d, err := notify.NewDeliverer(notify.DelivererOptions{Allow: []string{"0.0.0.0/0", "::/0"}, Self: selfAddrs(etcd, env.Mongo, api)})
	if err != nil {
		t.Fatal(err)
	}
	peers := etcd.PeerEndpoints()
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

// Subscriptions are capped per DIG and in all; one more is refused with 409
// naming the flag, and a replaced subscription is no new one.
func TestSubscriptionsAreCapped(t *testing.T) {
	r := start(t, Options{DataDir: t.TempDir(), CallbackAllow: []string{"127.0.0.1"},
		Notify: NotifyOptions{MaxSubscriptions: 3, MaxSubscriptionsPerSubject: 2}})
	must := func(want int, method, path, body string) string {
		t.Helper()
		code, got := r.call(t, method, path, body)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, got, want)
		}
		return got
	}
	must(201, "POST", "/v2/projects", `{"metadata":{"name":"p"}}`)
	must(201, "POST", "/v2/projects/p/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`)
	ca := "/v2/projects/p/composite-apps/ca/v1"
	must(201, "POST", ca+"/composite-profiles", `{"metadata":{"name":"cpf"}}`)
	for _, dig := range []string{"d1", "d2"} {
		must(201, "POST", ca+"/deployment-intent-groups", `{"metadata":{"name":"`+dig+`"},"spec":{"compositeProfile":"cpf","version":"r1"}}`)
	}
	sub := func(name string) string { return `{"name":"` + name + `","callback-url":"http://127.0.0.1:9/x"}` }
	d1, d2 := ca+"/deployment-intent-groups/d1/status/subscriptions", ca+"/deployment-intent-groups/d2/status/subscriptions"
	must(201, "POST", d1, sub("s1"))
	must(201, "POST", d1, sub("s2"))
	if got := must(409, "POST", d1, sub("s3")); !strings.Contains(got, "--max-subscriptions-per-subject") {
		t.Fatalf("beyond the per-DIG cap: %s", got)
	}
	must(200, "PUT", d1+"/s2", sub("s2")) // a replacement
	if got := must(409, "PUT", d1+"/s3", sub("s3")); !strings.Contains(got, "--max-subscriptions-per-subject") {
		t.Fatalf("a new one by PUT beyond the per-DIG cap: %s", got)
	}
	must(201, "POST", d2, sub("s1"))
	if got := must(409, "POST", d2, sub("s2")); !strings.Contains(got, "--max-subscriptions") {
		t.Fatalf("beyond the total cap: %s", got)
	}
	must(202, "DELETE", d1+"/s1", "")
	must(201, "POST", d2, sub("s2"))
}
