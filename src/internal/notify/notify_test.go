package notify

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

func TestDigestIgnoresChurn(t *testing.T) {
	a := status.Digest("Ready", "", "Applied", "Present", json.RawMessage(`{"readyReplicas":2,"replicas":2}`))
	b := status.Digest("Ready", "", "Applied", "Present", json.RawMessage(`{ "replicas": 2, "readyReplicas": 2 }`))
	if a != b {
		t.Fatal("key order or spacing of .status changed the digest")
	}
	for name, other := range map[string]string{
		"readiness": status.Digest("Pending", "1 of 2", "Applied", "Present", json.RawMessage(`{"readyReplicas":2,"replicas":2}`)),
		"status":    status.Digest("Ready", "", "Applied", "Present", json.RawMessage(`{"readyReplicas":1,"replicas":2}`)),
		"rsync":     status.Digest("Ready", "", "Retrying", "Present", json.RawMessage(`{"readyReplicas":2,"replicas":2}`)),
	} {
		if other == a {
			t.Errorf("a change of %s left the digest unchanged", name)
		}
	}
}

func TestDiffAgainstLastDelivered(t *testing.T) {
	e := func(key, digest string) Entry {
		return Entry{Key: key, Digest: digest, Payload: map[string]any{"name": key}}
	}
	last := map[string]string{"a": "1", "b": "1", "c": "1"}
	current := Runs{{e("a", "1"), e("b", "2"), e("d", "1")}}
	ch, delta, gone := diffDelta(last, current, nil, func(key string) map[string]any {
		return map[string]any{"name": key, "gone": true}
	})
	next := maps.Clone(last)
	maps.Copy(next, delta)
	for _, k := range gone {
		delete(next, k)
	}
	if len(ch.Created) != 1 || ch.Created[0]["name"] != "d" || len(ch.Modified) != 1 || ch.Modified[0]["name"] != "b" ||
		len(ch.Deleted) != 1 || ch.Deleted[0]["name"] != "c" || ch.Deleted[0]["gone"] != true {
		t.Fatalf("changes = %+v", ch)
	}
	if len(next) != 3 || next["b"] != "2" || !maps.Equal(next, digestsOf(current)) {
		t.Fatalf("next = %v", next)
	}
	// A burst that returns to the delivered state is no change at all.
	if ch, _, _ := diffDelta(next, current, nil, nil); !ch.Empty() {
		t.Fatalf("no net change, got %+v", ch)
	}
}

func TestDeliverHeadersSignatureAndOutcomes(t *testing.T) {
	var code atomic.Int64
	code.Store(200)
	got := make(chan *http.Request, 10)
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, b)
		got <- r
		w.WriteHeader(int(code.Load()))
	}))
	defer srv.Close()
	d, err := NewDeliverer(DelivererOptions{Allow: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	del := Delivery{URL: srv.URL, ID: "d-1", Sequence: 7, Timestamp: ts, Body: []byte(`{"ready":true}`), Secret: "s3cret"}
	for c, want := range map[int]Outcome{200: Delivered, 204: Delivered, 500: Retry, 503: Retry, 429: Retry, 408: Retry, 400: Failed, 404: Failed, 302: Failed} {
		code.Store(int64(c))
		res := d.Deliver(context.Background(), del)
		if res.Outcome != want || res.Status != c {
			t.Errorf("status %d: outcome %s (%d), want %s", c, res.Outcome, res.Status, want)
		}
		r := <-got
		if r.Header.Get(HeaderDelivery) != "d-1" || r.Header.Get(HeaderSequence) != "7" || r.Header.Get(HeaderTimestamp) != strconv.FormatInt(ts.Unix(), 10) {
			t.Fatalf("headers = %v", r.Header)
		}
		if r.Header.Get(HeaderSignature) != Sign("s3cret", ts.Unix(), []byte(`{"ready":true}`)) {
			t.Fatalf("signature = %q", r.Header.Get(HeaderSignature))
		}
	}
	// The same frozen payload every time.
	for _, b := range bodies {
		if string(b) != `{"ready":true}` {
			t.Fatalf("body = %s", b)
		}
	}
	del.Secret = ""
	code.Store(200)
	d.Deliver(context.Background(), del)
	if r := <-got; r.Header.Get(HeaderSignature) != "" {
		t.Fatal("signed without a secret")
	}
}

func TestDeliverTimesOutAndRetries(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	d, _ := NewDeliverer(DelivererOptions{AttemptTimeout: 200 * time.Millisecond, Allow: []string{"127.0.0.1"}})
	start := time.Now()
	res := d.Deliver(context.Background(), Delivery{URL: srv.URL, ID: "x", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")})
	if res.Outcome != Retry || res.Err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("hanging receiver: %+v after %s", res, time.Since(start))
	}
	if r := Reason(res); r != "no answer in time" {
		t.Fatalf("reason = %q", r)
	}
	d.client.CloseIdleConnections()
}

// fakeResolver answers lookups from a map: unit tests never ask a real
// DNS server.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var testResolver = fakeResolver{
	"localhost":         {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
	"hooks.example.com": {netip.MustParseAddr("203.0.113.7")},
	"so.internal":       {netip.MustParseAddr("10.1.2.3")},
	"rebind.example":    {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("169.254.169.254")},
	"metadata.internal": {netip.MustParseAddr("169.254.169.254")},
}

func deliverer(t *testing.T, opts DelivererOptions) *Deliverer {
	t.Helper()
	opts.Resolver = testResolver
	d, err := NewDeliverer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.client.CloseIdleConnections)
	return d
}

// The policy's verdicts, checked on addresses and names without dialing
// anything: SPEC section 8 and issue 14.
func TestCallbackPolicyAtSubscribeTime(t *testing.T) {
	ctx := context.Background()
	def := deliverer(t, DelivererOptions{Self: []string{"10.0.0.5:9015", "127.0.0.1:2379"}})
	for url, want := range map[string]string{
		"http://127.0.0.1:2379/x":          "own address",
		"http://127.0.0.1:8080/x":          "loopback",
		"http://127.8.9.10/x":              "loopback",
		"http://[::1]:9015/x":              "loopback",
		"http://[::ffff:127.0.0.1]/x":      "loopback",
		"http://0.0.0.0/x":                 "unspecified",
		"http://0.1.2.3/x":                 "unspecified",
		"http://[::]/x":                    "unspecified",
		"http://169.254.169.254/latest":    "link-local",
		"http://[fe80::1]/x":               "link-local",
		"http://[fe80::1%25eth0]/x":        "link-local",
		"http://224.0.0.1/x":               "multicast",
		"http://239.1.2.3/x":               "multicast",
		"http://[ff02::1]/x":               "multicast",
		"http://255.255.255.255/x":         "broadcast",
		"http://[fd00:ec2::254]/x":         "metadata",
		"http://100.100.100.200/x":         "metadata",
		"http://10.0.0.5:9015/x":           "own address",
		"http://localhost:8080/x":          "loopback",
		"http://LOCALHOST./x":              "loopback",
		"http://metadata.internal/x":       "link-local",
		"http://rebind.example/x":          "link-local",
		"http://nowhere.example/x":         "cannot be resolved",
		"ftp://10.0.0.1/x":                 "http(s)",
		"http://10.0.0.1:99999/x":          "port",
		"http://10.0.0.5:9016/x":           "",
		"http://10.1.2.3/x":                "",
		"http://172.16.0.1/x":              "",
		"http://192.168.1.1/x":             "",
		"http://[fd12::1]/x":               "",
		"http://100.64.0.1/x":              "",
		"https://hooks.example.com/x":      "",
		"http://so.internal:8080/notify":   "",
		"https://203.0.113.7:8443/webhook": "",
	} {
		err := def.CheckURL(ctx, url)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s refused: %v", url, err)
		case want != "" && (!errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an invalid error naming %q", url, err, want)
		}
	}
}

func TestCallbackAllowAndDeny(t *testing.T) {
	ctx := context.Background()
	d := deliverer(t, DelivererOptions{
		Allow: []string{"127.0.0.0/8", "10.9.1.0/24", "localhost", "*.trusted.example", "fe80::/10"},
		Deny:  []string{"10.9.0.0/16", "0.0.0.0/0", "::/0", "so.internal", "*.bad.example"},
		Self:  []string{"127.0.0.1:9015"},
	})
	for url, want := range map[string]string{
		"http://127.0.0.1:8080/x":     "",            // allowed /8 beats denied /0
		"http://127.0.0.1:9015/x":     "own address", // never, whatever Allow says
		"http://127.0.0.2:9015/x":     "own address", // a loopback alias reaches a listener on every address
		"http://localhost:9015/x":     "own address",
		"http://localhost:8080/x":     "", // a named host is trusted wherever it resolves
		"http://10.9.1.7/x":           "", // the /24 is longer than the denied /16
		"http://10.9.2.7/x":           "denied by --callback-deny",
		"http://192.168.1.1/x":        "denied by --callback-deny", // "only these": deny everything, allow a few
		"http://[fe80::1]/x":          "",
		"http://[2001:db8::1]/x":      "denied",
		"http://so.internal/x":        "host so.internal is denied",
		"http://a.bad.example/x":      "denied",
		"http://x.trusted.example/x":  "", // trusted: not even resolved
		"http://hooks.example.com/x":  "denied by --callback-deny",
		"http://[::ffff:10.9.1.7]/x":  "",
		"http://[::ffff:10.9.2.7]/x":  "denied",
		"http://10.9.1.7:65535/x":     "",
		"http://[fe80::1%25lo]:1234/": "",
	} {
		err := d.CheckURL(ctx, url)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s refused: %v", url, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error naming %q", url, err, want)
		}
	}
	for _, bad := range [][]string{{"10.0.0.0/33"}, {"a b"}, {"*.*.x"}, {"host:80"}} {
		if _, err := NewDeliverer(DelivererOptions{Allow: bad}); err == nil {
			t.Errorf("Allow %q accepted", bad)
		}
		if _, err := NewDeliverer(DelivererOptions{Deny: bad}); err == nil {
			t.Errorf("Deny %q accepted", bad)
		}
	}
}

// The dialer checks the address it is about to connect to — after DNS, so
// a name that resolved to an allowed address at subscribe time and to a
// refused one now is refused. Called directly: nothing is dialed.
func TestCallbackPolicyAtDialTime(t *testing.T) {
	d := deliverer(t, DelivererOptions{Allow: []string{"localhost"}, Self: []string{"10.0.0.5:9015"}})
	plain, trusted := context.Background(), context.WithValue(context.Background(), trustedHostKey{}, true)
	for _, c := range []struct {
		ctx     context.Context
		address string
		want    string
	}{
		{plain, "169.254.169.254:80", "link-local"},
		{plain, "[fe80::1%eth0]:80", "link-local"},
		{plain, "224.0.0.251:5353", "multicast"},
		{plain, "[ff05::2]:80", "multicast"},
		{plain, "127.0.0.1:2379", "loopback"},
		{plain, "[::1]:80", "loopback"},
		{plain, "0.0.0.0:80", "unspecified"},
		{plain, "10.0.0.5:9015", "own address"},
		{plain, "[64:ff9b::a9fe:a9fe]:80", "169.254.169.254 is a link-local"}, // NAT64 of the metadata address
		{plain, "[64:ff9b::a01:203]:80", ""},                                  // NAT64 of 10.1.2.3
		{plain, "10.1.2.3:8080", ""},
		{plain, "192.168.0.10:443", ""},
		{plain, "172.31.255.254:80", ""},
		{plain, "[fd00::1]:80", ""},
		{plain, "203.0.113.7:443", ""},
		{trusted, "127.0.0.1:8080", ""},
		{trusted, "10.0.0.5:9015", "own address"},
		{plain, "not-an-address", "cannot tell"},
	} {
		err := d.policy.control(c.ctx, "tcp", c.address, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s refused: %v", c.address, err)
		case c.want != "" && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want a refusal naming %q", c.address, err, c.want)
		}
	}
}

// Deliveries to a refused address fail for good, at dial time, and say
// why in a few words; allowed loopback receivers are delivered to.
func TestDeliverEnforcesThePolicy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://169.254.169.254/", http.StatusTemporaryRedirect)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte("secret internal detail"))
	}))
	defer srv.Close()
	ctx := context.Background()
	del := func(d *Deliverer, url string) Result {
		return d.Deliver(ctx, Delivery{URL: url, ID: "x", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")})
	}
	def := deliverer(t, DelivererOptions{})
	res := del(def, srv.URL)
	if res.Outcome != Failed || !errors.Is(res.Err, ErrNotAllowed) || Reason(res) != "refused: 127.0.0.1 is a loopback address (--callback-allow can allow it)" {
		t.Fatalf("loopback by default: %+v %q", res, Reason(res))
	}
	loop := deliverer(t, DelivererOptions{Allow: []string{"127.0.0.0/8"}})
	res = del(loop, srv.URL)
	if res.Outcome != Failed || res.Status != 400 || Reason(res) != "callback answered 400" {
		t.Fatalf("allowed receiver: %+v %q", res, Reason(res))
	}
	res = del(loop, srv.URL+"/redirect")
	if res.Status != http.StatusTemporaryRedirect || !strings.Contains(Reason(res), "redirects are not followed") {
		t.Fatalf("redirect: %+v %q", res, Reason(res))
	}
	named := deliverer(t, DelivererOptions{Allow: []string{"localhost"}})
	local := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	if res := del(named, local); res.Status != 400 {
		t.Fatalf("delivery to a named host: %+v", res)
	}
	if res := del(named, srv.URL); res.Outcome != Failed || !errors.Is(res.Err, ErrNotAllowed) {
		t.Fatalf("the same address by another name is not trusted: %+v", res)
	}
	denied := deliverer(t, DelivererOptions{Allow: []string{"127.0.0.1"}, Deny: []string{"localhost"}})
	if res := del(denied, local); res.Outcome != Failed || !strings.Contains(Reason(res), "host localhost is denied") {
		t.Fatalf("denied host: %+v %q", res, Reason(res))
	}
}

func TestReasonNeverEchoes(t *testing.T) {
	for res, want := range map[*Result]string{
		{Outcome: Delivered, Status: 200}:                                          "",
		{Outcome: Retry, Status: 503}:                                              "callback answered 503",
		{Outcome: Failed, Status: 302}:                                             "callback answered 302; redirects are not followed",
		{Outcome: Retry, Err: errors.New(`Post "http://u:p@h/?token=x": EOF`)}:     "request failed",
		{Outcome: Retry, Err: &net.DNSError{Err: "no such host", Name: "h"}}:       "cannot resolve the callback host",
		{Outcome: Retry, Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}: "connection refused",
		{Outcome: Retry, Err: &net.OpError{Op: "dial", Err: syscall.EHOSTUNREACH}}: "connection failed",
		{Outcome: Retry, Err: context.DeadlineExceeded}:                            "no answer in time",
	} {
		if got := Reason(*res); got != want {
			t.Errorf("Reason(%+v) = %q, want %q", *res, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	for attempt, bounds := range map[int][2]time.Duration{1: {500 * time.Millisecond, time.Second}, 3: {2 * time.Second, 4 * time.Second}, 10: {30 * time.Second, 60 * time.Second}} {
		for range 50 {
			if d := Backoff(attempt); d < bounds[0] || d > bounds[1] {
				t.Fatalf("Backoff(%d) = %s, want within %v", attempt, d, bounds)
			}
		}
	}
}

// Every IPv6 form that carries an IPv4 address is judged as that address
// (issue 23): each form of 127.0.0.1 and of 169.254.169.254 is refused for
// what the IPv4 address is, and each form of 10.1.2.3 is allowed. Nothing
// is dialed.
func TestCallbackPolicyJudgesTheIPv4AnIPv6AddressCarries(t *testing.T) {
	d := deliverer(t, DelivererOptions{})
	forms := map[string][]string{
		// mapped, compatible, translated (SIIT), well-known and local-use
		// NAT64 (every RFC 6052 length within /48), 6to4, Teredo (client)
		"127.0.0.1": {"::ffff:127.0.0.1", "::127.0.0.1", "::ffff:0:7f00:1", "64:ff9b::7f00:1", "2002:7f00:1::1",
			"64:ff9b:1:7f00:0:100::", "64:ff9b:1:7f:0:1::", "64:ff9b:1::7f:0:100:0", "64:ff9b:1::7f00:1", "2001:0:4136:e378:8000:63bf:80ff:fffe"},
		"169.254.169.254": {"::ffff:169.254.169.254", "::169.254.169.254", "::ffff:0:a9fe:a9fe", "64:ff9b::a9fe:a9fe",
			"2002:a9fe:a9fe::1", "64:ff9b:1:a9fe:a9:fe00::", "64:ff9b:1::a9fe:a9fe"},
	}
	want := map[string]string{"127.0.0.1": "127.0.0.1 is a loopback address", "169.254.169.254": "169.254.169.254 is a link-local address"}
	for v4, list := range forms {
		for _, form := range list {
			ip := netip.MustParseAddr(form)
			if ip.Is4() {
				t.Fatalf("%s is not an IPv6 form", form)
			}
			err := d.policy.checkAddr(ip, 80, false)
			if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), want[v4]) {
				t.Errorf("%s (%s): %v, want a refusal naming %q", form, v4, err, want[v4])
			}
			if err := d.CheckURL(context.Background(), "http://["+form+"]:80/x"); err == nil || !strings.Contains(err.Error(), want[v4]) {
				t.Errorf("callback to [%s]: %v, want a refusal naming %q", form, err, want[v4])
			}
		}
	}
	for _, form := range []string{"::ffff:10.1.2.3", "::10.1.2.3", "::ffff:0:a01:203", "64:ff9b::a01:203", "2002:a01:203::1", "64:ff9b:1::a01:203"} {
		if err := d.policy.checkAddr(netip.MustParseAddr(form), 80, false); err != nil {
			t.Errorf("%s (10.1.2.3) refused: %v", form, err)
		}
	}
	// IPv6's own loopback and unspecified addresses stay what they are.
	for form, why := range map[string]string{"::1": "::1 is a loopback address", "::": ":: is an unspecified address"} {
		if err := d.policy.checkAddr(netip.MustParseAddr(form), 80, false); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want %q", form, err, why)
		}
	}
}

// A callback host in one of inet_aton's shorthands (127.1, octal, hex,
// one decimal number) is refused as the address it spells, and never
// handed to a resolver, which would take it for that address.
func TestCallbackHostShorthandsNeverReachTheResolver(t *testing.T) {
	asked := map[string]bool{}
	opts := DelivererOptions{Resolver: recordingResolver{asked}, Allow: []string{"10.0.0.0/8"}}
	d, err := NewDeliverer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.client.CloseIdleConnections)
	for host, want := range map[string]string{
		"127.1":        "IPv4 address 127.0.0.1 in a shorthand form",
		"127.0.1":      "IPv4 address 127.0.0.1",
		"0x7f.1":       "IPv4 address 127.0.0.1",
		"0177.0.0.1":   "IPv4 address 127.0.0.1",
		"2130706433":   "IPv4 address 127.0.0.1",
		"0x7f000001":   "IPv4 address 127.0.0.1",
		"017700000001": "IPv4 address 127.0.0.1",
		"10.1":         "IPv4 address 10.0.0.1", // even where the address is allowed: spell it out
		"1.2.3.4.":     "IPv4 address 1.2.3.4",
		"08.1.2.3":     "looks like an IPv4 address but is not one",
		"1.2.3.4.5":    "looks like an IPv4 address but is not one",
		"256.1":        "looks like an IPv4 address but is not one", // a leading part is one byte
		"example.123":  "looks like an IPv4 address",
		"a.0x":         "looks like an IPv4 address",
	} {
		err := d.CheckURL(context.Background(), "http://"+host+":8080/x")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a refusal naming %q", host, err, want)
		}
		res := d.Deliver(context.Background(), Delivery{URL: "http://" + host + ":8080/x", ID: "x", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")})
		if res.Outcome != Failed || !errors.Is(res.Err, ErrNotAllowed) {
			t.Errorf("delivery to %s: %+v", host, res)
		}
	}
	if len(asked) > 0 {
		t.Fatalf("the resolver was asked about %v", asked)
	}
	// Names that merely contain digits are names.
	for _, host := range []string{"123.example", "a1.b2", "0x7f.example", "v6.123abc"} {
		if _, err := d.policy.checkHost(host); err != nil {
			t.Errorf("%s refused: %v", host, err)
		}
	}
}

// recordingResolver records the names it is asked about and resolves none.
type recordingResolver struct{ asked map[string]bool }

func (r recordingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.asked[host] = true
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// The unspecified address (0.0.0.0, ::) with the port of one of the
// orchestrator's listeners reaches that listener: refused as its own
// address, even when --callback-allow allows everything.
func TestUnspecifiedAddressIsTheOrchestratorsOwn(t *testing.T) {
	d := deliverer(t, DelivererOptions{Allow: []string{"0.0.0.0/0", "::/0"}, Self: SelfAddrs("127.0.0.1:9015", "127.0.0.1:2380")})
	for _, url := range []string{"http://0.0.0.0:9015/v2/projects", "http://[::]:9015/v2/projects", "http://0.0.0.0:2380/x",
		"http://[::ffff:0.0.0.0]:9015/x", "http://127.0.0.1:2380/x"} {
		if err := d.CheckURL(context.Background(), url); err == nil || !strings.Contains(err.Error(), "own address") {
			t.Errorf("%s: %v, want the orchestrator's own address", url, err)
		}
	}
	if err := d.CheckURL(context.Background(), "http://0.0.0.0:8080/x"); err != nil {
		t.Errorf("0.0.0.0 on another port, allowed by --callback-allow: %v", err)
	}
}

// blackHole accepts connections and never answers; it passes on those
// that carry a POST of the delivery it waits for (id). Others are closed:
// under a busy test run a client of a server that stopped can dial the
// port this listener got after it (a CI run counted such a stranger as a
// third attempt), and other tests' deliverers may be about.
type blackHole struct {
	ln    net.Listener
	id    string
	conns chan net.Conn
}

func newBlackHole(t *testing.T) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{ln: ln, id: t.Name() + "-" + strconv.FormatInt(time.Now().UnixNano(), 36), conns: make(chan net.Conn, 100)}
	var (
		mu   sync.Mutex
		all  []net.Conn
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			select {
			case <-done: // cleanup has closed the others already
				mu.Unlock()
				_ = c.Close()
				return
			default:
			}
			all = append(all, c)
			mu.Unlock()
			wg.Go(func() {
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil || req.Method != http.MethodPost || req.Header.Get(HeaderDelivery) != b.id {
					_ = c.Close()
					return
				}
				select {
				case b.conns <- c:
				case <-done:
				}
			})
		}
	})
	t.Cleanup(func() {
		close(done)
		_ = ln.Close()
		mu.Lock()
		for _, c := range all {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return b
}

// Deliveries in flight are capped, in all and per receiver host: 10
// attempts at once to a receiver that never answers open at most its
// share of connections, and a second receiver is still delivered to
// meanwhile. Before, every attempt held a connection of its own.
func TestDeliveriesInFlightAreCapped(t *testing.T) {
	hole := newBlackHole(t)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer ok.Close()
	// Attempts that outlived their timeout would free their slots for a
	// real third connection: the test's cancel ends them instead.
	d, err := NewDeliverer(DelivererOptions{Allow: []string{"127.0.0.1"}, AttemptTimeout: time.Minute, MaxDeliveries: 4, MaxDeliveriesPerHost: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.client.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.Deliver(ctx, Delivery{URL: "http://" + hole.ln.Addr().String() + "/", ID: hole.id, Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")})
		}()
	}
	// Two connections come; the other eight attempts wait for a slot.
	for range 2 {
		select {
		case <-hole.conns:
		case <-time.After(10 * time.Second):
			t.Fatal("the first attempts did not connect")
		}
	}
	if res := d.Deliver(ctx, Delivery{URL: ok.URL, ID: "y", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")}); res.Outcome != Delivered {
		t.Fatalf("another receiver beside the stuck one: %+v", res)
	}
	select {
	case <-hole.conns:
		t.Fatal("a third connection to the stuck receiver while two attempts held it")
	case <-time.After(500 * time.Millisecond):
	}
	cancel()
	wg.Wait()
}

// TestDiffDeltaIsDiffThenDeltaOf: the notification's one-pass diff says
// what Diff and deltaOf said together, on random delivered and current
// states in random runs, some of those that match the delivered digests
// named clean.
func TestDiffDeltaIsDiffThenDeltaOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		last := map[string]string{}
		for i := range rng.IntN(20) {
			last[fmt.Sprintf("k%d", i*2)] = fmt.Sprint(rng.IntN(3))
		}
		var current []Entry
		for i := range rng.IntN(40) {
			if rng.IntN(3) > 0 {
				current = append(current, Entry{Key: fmt.Sprintf("k%d", i), Digest: fmt.Sprint(rng.IntN(3)), Payload: map[string]any{"i": i}})
			}
		}
		var runs Runs
		clean := runSet{}
		for rest := current; len(rest) > 0; {
			run := rest[:1+rng.IntN(min(len(rest), 4))]
			rest = rest[len(run):]
			runs = append(runs, run)
			matches := true
			for _, e := range run {
				matches = matches && last[e.Key] == e.Digest
			}
			if matches && rng.IntN(2) == 0 {
				clean[&run[0]] = len(run)
			}
		}
		wantCh, next := referenceDiff(last, current, DeletedPayload)
		wantDelta, wantGone := deltaOf(last, next)
		ch, delta, gone := diffDelta(last, runs, clean, DeletedPayload)
		if !reflect.DeepEqual(ch, wantCh) || !reflect.DeepEqual(delta, wantDelta) || !reflect.DeepEqual(gone, wantGone) {
			t.Fatalf("last %v current %v:\ngot  %v %v %v\nwant %v %v %v", last, current, ch, delta, gone, wantCh, wantDelta, wantGone)
		}
	}
}

// referenceDiff is the notification's diff written plainly, apart from
// diffDelta: created and modified in current's order, deleted by key, and
// every current digest.
func referenceDiff(last map[string]string, current []Entry, deletedPayload func(string) map[string]any) (Changes, map[string]string) {
	ch := Changes{Created: []map[string]any{}, Deleted: []map[string]any{}, Modified: []map[string]any{}}
	next := map[string]string{}
	for _, e := range current {
		next[e.Key] = e.Digest
		if prev, ok := last[e.Key]; !ok {
			ch.Created = append(ch.Created, e.Payload)
		} else if prev != e.Digest {
			ch.Modified = append(ch.Modified, e.Payload)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(last)) {
		if _, ok := next[key]; !ok {
			p := map[string]any{"key": key}
			if dp := deletedPayload(key); dp != nil {
				p = dp
			}
			ch.Deleted = append(ch.Deleted, p)
		}
	}
	return ch, next
}

// BenchmarkDiffDelta: one notification's diff on a DIG over 10,000
// clusters (5 resources each) where 20 placements changed since the last
// delivery, comparing every entry (none known clean) and skipping the
// runs known delivered.
func BenchmarkDiffDelta(b *testing.B) {
	const placements, per, changed = 10000, 5, 20
	last := map[string]string{}
	runs := make(Runs, placements)
	for p := range placements {
		run := make([]Entry, per)
		for i := range run {
			key := fmt.Sprintf("app+prov+cluster%05d+apps+v1+Deployment+default+r%d", p, i)
			run[i] = Entry{Key: key, Digest: "1", Payload: map[string]any{"key": key}}
			last[key] = "1"
		}
		runs[p] = run
	}
	clean := runSet{}
	clean.reset(runs)
	for p := range changed {
		run := slices.Clone(runs[p*(placements/changed)])
		run[0].Digest = "2"
		runs[p*(placements/changed)] = run
	}
	for _, c := range []struct {
		name  string
		clean runSet
	}{{"every-entry", nil}, {"changed-runs", clean}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if ch, _, _ := diffDelta(last, runs, c.clean, DeletedPayload); len(ch.Modified) != changed {
					b.Fatalf("%d modified", len(ch.Modified))
				}
			}
		})
	}
}
