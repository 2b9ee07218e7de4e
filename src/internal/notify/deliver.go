package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Delivery headers (SPEC section 8).
const (
	HeaderDelivery  = "X-Argus-Delivery"
	HeaderSequence  = "X-Argus-Sequence"
	HeaderTimestamp = "X-Argus-Timestamp"
	HeaderSignature = "X-Argus-Signature"
)

// Delivery is one frozen payload: resent unchanged, under the same id and
// sequence number, until it is answered.
type Delivery struct {
	URL       string
	ID        string
	Sequence  int64
	Timestamp time.Time
	Body      []byte
	// Secret, when set, signs the delivery.
	Secret string
}

// Outcome classes of an attempt.
type Outcome int

const (
	// Delivered: the receiver answered 2xx.
	Delivered Outcome = iota
	// Retry: 408, 429, 5xx, or a network error; try again after backoff.
	Retry
	// Failed: any other answer; the subscription records it and moves on.
	Failed
)

func (o Outcome) String() string {
	return [...]string{"delivered", "retry", "failed"}[o]
}

// Result is what one attempt came to.
type Result struct {
	Outcome Outcome
	// Status is the receiver's HTTP status, 0 when none came back.
	Status int
	Err    error
}

// Sign returns "sha256=<hex HMAC-SHA256 of timestamp + "." + body>".
func Sign(secret string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte("."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// DelivererOptions configures a Deliverer.
type DelivererOptions struct {
	// AttemptTimeout bounds each POST; 0 means 10s.
	AttemptTimeout time.Duration
	// Allow restricts callbacks (see CheckURL); empty allows every address.
	Allow []string
}

// Deliverer POSTs deliveries with one shared client.
type Deliverer struct {
	client  *http.Client
	timeout time.Duration
	allow   allowList
}

// NewDeliverer returns a Deliverer whose dialer refuses addresses outside
// the allow-list, whatever a host name resolves to at delivery time.
func NewDeliverer(opts DelivererOptions) (*Deliverer, error) {
	if opts.AttemptTimeout == 0 {
		opts.AttemptTimeout = 10 * time.Second
	}
	allow, err := parseAllow(opts.Allow)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: opts.AttemptTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip != nil && !allow.allowsIP(ip) {
			return fmt.Errorf("%w: %s", ErrNotAllowed, ip)
		}
		return nil
	}}
	plain := &net.Dialer{Timeout: opts.AttemptTimeout}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		// A host the allow-list names is allowed wherever it resolves;
		// any other host only to addresses inside its networks.
		if named, _ := ctx.Value(namedHostKey{}).(bool); named {
			return plain.DialContext(ctx, network, addr)
		}
		return dialer.DialContext(ctx, network, addr)
	}
	transport.Proxy = nil // a proxy would hide the real destination from the allow-list
	// Many subscriptions commonly share one receiver (an SO, an inventory):
	// keep enough connections to it warm that a fan-out does not redial.
	transport.MaxIdleConnsPerHost = 64
	return &Deliverer{
		client: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect could lead outside the allow-list
		}},
		timeout: opts.AttemptTimeout,
		allow:   allow,
	}, nil
}

// Deliver makes one attempt. It never holds a lock and always drains and
// closes the response body.
func (d *Deliverer) Deliver(ctx context.Context, del Delivery) Result {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	if !d.allow.empty() && d.allow.allowsHost(req.URL.Hostname()) {
		req = req.WithContext(context.WithValue(ctx, namedHostKey{}, true))
	}
	ts := del.Timestamp.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "argus-notifier")
	req.Header.Set(HeaderDelivery, del.ID)
	req.Header.Set(HeaderSequence, strconv.FormatInt(del.Sequence, 10))
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	if del.Secret != "" {
		req.Header.Set(HeaderSignature, Sign(del.Secret, ts, del.Body))
	}
	resp, err := d.client.Do(req)
	if errors.Is(err, ErrNotAllowed) {
		return Result{Outcome: Failed, Err: err} // retrying cannot make it allowed
	}
	if err != nil {
		return Result{Outcome: Retry, Err: err}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
	return Result{Outcome: classify(resp.StatusCode), Status: resp.StatusCode}
}

func classify(code int) Outcome {
	switch {
	case code >= 200 && code < 300:
		return Delivered
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		return Retry
	default:
		return Failed
	}
}

// Backoff is the wait before retry attempt n (1-based): exponential from 1s,
// capped at 60s, with full jitter in its upper half.
func Backoff(attempt int) time.Duration {
	d := time.Second << min(attempt-1, 6)
	d = min(d, 60*time.Second)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// allowList holds host names (exact, or "*.suffix") and CIDRs.
type allowList struct {
	hosts []string
	nets  []*net.IPNet
}

func parseAllow(entries []string) (allowList, error) {
	var a allowList
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if _, n, err := net.ParseCIDR(e); err == nil {
			a.nets = append(a.nets, n)
			continue
		}
		if ip := net.ParseIP(e); ip != nil {
			bits := 32
			if ip.To4() == nil {
				bits = 128
			}
			a.nets = append(a.nets, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		a.hosts = append(a.hosts, strings.ToLower(e))
	}
	return a, nil
}

func (a allowList) empty() bool { return len(a.hosts) == 0 && len(a.nets) == 0 }

func (a allowList) allowsIP(ip net.IP) bool {
	if a.empty() {
		return true
	}
	for _, n := range a.nets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

func (a allowList) allowsHost(host string) bool {
	host = strings.ToLower(host)
	for _, h := range a.hosts {
		if h == host || strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]) {
			return true
		}
	}
	return false
}

// CheckURL validates a callback URL: absolute http(s) with a host, and — when
// the allow-list is not empty — a host named in it, or an address (literal
// or resolved) inside one of its CIDRs. Violations are errdefs.ErrInvalid.
func (d *Deliverer) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return errdefs.Invalid("callback-url %q is not an absolute http(s) URL", raw)
	}
	if d.allow.empty() || d.allow.allowsHost(u.Hostname()) {
		return nil
	}
	ips := []net.IP{net.ParseIP(u.Hostname())}
	if ips[0] == nil {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, u.Hostname())
		if err != nil {
			return errdefs.InvalidWrap(err, "callback-url host %q cannot be resolved", u.Hostname())
		}
		ips = ips[:0]
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	for _, ip := range ips {
		if !d.allow.allowsIP(ip) {
			return errdefs.Invalid("callback-url %q is outside the allowed callback hosts and networks", raw)
		}
	}
	if len(ips) == 0 {
		return errdefs.Invalid("callback-url host %q has no address", u.Hostname())
	}
	return nil
}

// namedHostKey marks a request to a host the allow-list names.
type namedHostKey struct{}

// ErrNotAllowed marks a delivery refused because its address is outside the
// allow-list.
var ErrNotAllowed = errors.New("callback address not in the allow-list")
