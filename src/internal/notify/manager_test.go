package notify

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/status"
)

func TestPayloadAddsTheChangesToTheEnvelope(t *testing.T) {
	ch := Changes{Created: []map[string]any{{"name": "a"}}, Deleted: []map[string]any{}, Modified: []map[string]any{}}
	for _, c := range []struct {
		envelope any
		want     string
	}{
		{nil, `{"resource-changes":{"created":[{"name":"a"}],"deleted":[],"modified":[]}}`},
		{map[string]any{}, `{"resource-changes":{"created":[{"name":"a"}],"deleted":[],"modified":[]}}`},
		{instanceEnvelope{InstanceID: "i", Ready: true}, `{"instance-id":"i","ready":true,"resource-changes":{"created":[{"name":"a"}],"deleted":[],"modified":[]}}`},
		{digEnvelope{name: "s", response: map[string]any{"name": "dig"}}, `{"subscription-name":"s","name":"dig","resource-changes":{"created":[{"name":"a"}],"deleted":[],"modified":[]}}`},
		{digEnvelope{response: struct{}{}}, `{"resource-changes":{"created":[{"name":"a"}],"deleted":[],"modified":[]}}`},
	} {
		got, err := payload(c.envelope, ch)
		if err != nil || string(got) != c.want {
			t.Errorf("payload(%v) = %s, %v; want %s", c.envelope, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("invalid JSON %s", got)
		}
	}
	if _, err := payload([]int{1}, ch); err == nil {
		t.Error("an envelope that is not an object was accepted")
	}
}

func TestResourceKeyRoundTrips(t *testing.T) {
	k := status.ResourceKey{App: "a", ClusterProvider: "cp", Cluster: "c1", Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "web"}
	back, ok := status.ParseResourceKey(k.String())
	if !ok || back != k {
		t.Fatalf("round trip: %+v %v", back, ok)
	}
	p := DeletedPayload(k.String())
	if p["app"] != "a" || p["namespace"] != "ns" || p["GVK"].(map[string]string)["Kind"] != "Deployment" {
		t.Fatalf("deleted payload %v", p)
	}
	if _, ok := status.ParseResourceKey("a|b"); ok {
		t.Fatal("a short key parsed")
	}
	if DeletedPayload("nonsense") != nil {
		t.Fatal("a payload for a malformed key")
	}
}

func validator(t testing.TB, allow ...string) *Manager {
	d, err := NewDeliverer(DelivererOptions{Allow: allow, Deny: []string{"192.168.0.0/16"}, Resolver: testResolver})
	if err != nil {
		t.Fatal(err)
	}
	return &Manager{opts: ManagerOptions{Deliverer: d, CheckQuery: func(v url.Values) error {
		if ty := v.Get("type"); ty != "" && ty != "rsync" && ty != "cluster" {
			return errdefs.Invalid("type %q is not one of rsync, cluster", ty)
		}
		return nil
	}}}
}

func TestValidateFollowsSPEC8(t *testing.T) {
	m := validator(t, "10.0.0.0/8", "hooks.example")
	dig := DIGSubject(catalog.Key{"p", "ca", "v1", "d"})
	inst := InstanceSubject("42")
	ok := Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: "http://10.1.2.3/cb"}}
	for name, c := range map[string]struct {
		subj Subject
		sub  Subscription
		want string // "" = valid
	}{
		"valid":            {dig, ok, ""},
		"allowed host":     {dig, Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: "https://hooks.example/x"}}, ""},
		"no name":          {dig, Subscription{SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: ok.CallbackURL}}, "name"},
		"bad name":         {dig, Subscription{Name: "a/b", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: ok.CallbackURL}}, "name"},
		"no callback":      {dig, Subscription{Name: "s"}, "callback-url"},
		"negative":         {dig, Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: ok.CallbackURL, MinNotifyInterval: -1}}, "min-notify-interval"},
		"not http":         {dig, Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: "ftp://10.1.2.3/x"}}, "http(s)"},
		"relative":         {dig, Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: "/cb"}}, "http(s)"},
		"denied":           {dig, Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: "http://192.168.1.1/cb"}}, "denied by --callback-deny"},
		"loopback":         {dig, Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: "http://127.0.0.1:2379/cb"}}, "loopback"},
		"bad filter":       {dig, Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: ok.CallbackURL, Type: "x"}}, "rsync, cluster"},
		"instance filters": {inst, Subscription{Name: "s", SubscriptionSpec: catalog.SubscriptionSpec{CallbackURL: ok.CallbackURL, App: []string{"a"}}}, "deployment intent group"},
	} {
		err := m.validate(context.Background(), c.subj, c.sub)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.want != "" && (!errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an invalid error naming %q", name, err, c.want)
		}
	}
}

// FuzzSubscriptionBody: whatever body arrives, decoding and validation
// never panic, and what passes is a subscription SPEC 8 allows.
func FuzzSubscriptionBody(f *testing.F) {
	for _, s := range []string{
		`{"name":"s","callback-url":"http://10.0.0.1/x","min-notify-interval":5,"metadata":{"a":1},"secret":"k"}`,
		`{"name":"s","callback-url":"http://10.0.0.1/x","type":"cluster","app":["a"],"cluster":["cp+c"]}`,
		`{"name":"","callback-url":"ftp://x"}`,
		`{"min-notify-interval":-3}`,
		`{"name":"s","callback-url":"http://[::1]:80/x"}`,
	} {
		f.Add([]byte(s))
	}
	m := validator(f, "10.0.0.0/8", "::1/128")
	dig := DIGSubject(catalog.Key{"p", "ca", "v1", "d"})
	f.Fuzz(func(t *testing.T, body []byte) {
		var sub Subscription
		if json.Unmarshal(body, &sub) != nil {
			return
		}
		if err := m.validate(context.Background(), dig, sub); err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("validation failed with a non-400 error: %v", err)
			}
			return
		}
		u, err := url.Parse(sub.CallbackURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || sub.MinNotifyInterval < 0 || catalog.ValidateName("s", sub.Name) != nil {
			t.Fatalf("accepted %+v", sub)
		}
	})
}
