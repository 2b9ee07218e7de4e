package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/argus-mc/argus/src/internal/backoff"
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

// DefaultAttemptTimeout bounds a POST to a callback unless
// DelivererOptions say otherwise.
const DefaultAttemptTimeout = 10 * time.Second

// DelivererOptions configures a Deliverer. The zero value refuses
// callbacks to loopback, link-local, unspecified, broadcast, multicast and
// cloud metadata addresses and allows the rest (private ranges included).
type DelivererOptions struct {
	// AttemptTimeout bounds each POST; 0 means DefaultAttemptTimeout.
	AttemptTimeout time.Duration
	// Allow names host names ("hooks.example.com", "*.example.com"),
	// addresses and CIDRs callbacks may reach although the defaults or a
	// shorter Deny prefix refuse them. A named host is trusted wherever it
	// resolves.
	Allow []string
	// Deny names host names, addresses and CIDRs callbacks may never
	// reach, unless a longer Allow prefix takes an address back.
	Deny []string
	// Self lists the orchestrator's own listen addresses (host:port, see
	// SelfAddrs); callbacks never reach them, whatever Allow says.
	Self []string
	// Resolver looks callback hosts up when a subscription is checked;
	// nil means net.DefaultResolver. (Dialing resolves again, and the
	// address dialed is checked once more.)
	Resolver Resolver
	// MaxDeliveries bounds the attempts in flight (each holds a
	// connection), MaxDeliveriesPerHost those to one receiver host; more
	// wait. 0 means DefaultMaxDeliveries, and a quarter of it per host.
	MaxDeliveries, MaxDeliveriesPerHost int
}

// Resolver looks host names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Deliverer POSTs deliveries with one shared client.
type Deliverer struct {
	client   *http.Client
	timeout  time.Duration
	policy   *policy
	resolver Resolver
	slots    *slots
}

// NewDeliverer returns a Deliverer whose dialer checks every address it
// connects to against the policy, whatever a host name resolved to when
// the subscription was made (DNS rebinding).
func NewDeliverer(opts DelivererOptions) (*Deliverer, error) {
	if opts.AttemptTimeout == 0 {
		opts.AttemptTimeout = DefaultAttemptTimeout
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	pol, err := newPolicy(opts.Allow, opts.Deny, opts.Self)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: opts.AttemptTimeout, ControlContext: pol.control}
	slots := newSlots(opts.MaxDeliveries, opts.MaxDeliveriesPerHost)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = dialer.DialContext
	transport.Proxy = nil // a proxy would hide the real destination from the policy
	// Many subscriptions commonly share one receiver (an SO, an inventory):
	// keep enough connections to it warm that a fan-out does not redial,
	// and no more, idle or not, than the slots allow: each is a descriptor.
	transport.MaxConnsPerHost = slots.perHost
	transport.MaxIdleConnsPerHost = min(64, slots.perHost)
	transport.MaxIdleConns = min(transport.MaxIdleConns, cap(slots.all))
	return &Deliverer{
		client: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			// Never followed: a redirect could lead to an address the
			// policy refuses, and the 3xx is recorded as the answer.
			return http.ErrUseLastResponse
		}},
		timeout:  opts.AttemptTimeout,
		policy:   pol,
		resolver: opts.Resolver,
		slots:    slots,
	}, nil
}

// Deliver makes one attempt, once a delivery slot is free (the wait is
// not part of the attempt's timeout). It never holds a lock and always
// drains and closes the response body, whose content is never kept.
func (d *Deliverer) Deliver(ctx context.Context, del Delivery) Result {
	req, err := http.NewRequest(http.MethodPost, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	trusted, err := d.policy.checkHost(req.URL.Hostname())
	if err != nil {
		return Result{Outcome: Failed, Err: err} // retrying cannot make it allowed
	}
	release, err := d.slots.acquire(ctx, req.URL.Host)
	if err != nil {
		return Result{Outcome: Retry, Err: err}
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	req = req.WithContext(ctx)
	if trusted {
		req = req.WithContext(context.WithValue(ctx, trustedHostKey{}, true))
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
	return Result{Outcome: Classify(resp.StatusCode), Status: resp.StatusCode}
}

// Reason says in a few words what an attempt came to, for a
// subscription's last-error: never the receiver's answer body nor the
// callback URL (which may carry credentials), only a status code or the
// kind of failure.
func Reason(res Result) string {
	var refused *RefusedError
	var dns *net.DNSError
	var netErr net.Error
	var certErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	switch err := res.Err; {
	case err == nil && res.Outcome == Delivered:
		return ""
	case err == nil && res.Status >= 300 && res.Status < 400:
		return "callback answered " + strconv.Itoa(res.Status) + "; redirects are not followed"
	case err == nil:
		return "callback answered " + strconv.Itoa(res.Status)
	case errors.As(err, &refused):
		return "refused: " + refused.Reason
	case errors.As(err, &dns):
		return "cannot resolve the callback host"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "no answer in time"
	case errors.As(err, &certErr), errors.As(err, &recordErr):
		return "TLS handshake failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	default:
		var opErr *net.OpError
		if errors.As(err, &opErr) {
			return "connection failed"
		}
		return "request failed"
	}
}

// Classify is the outcome of an HTTP answer: 2xx delivered; 408, 429 and
// 5xx worth a retry; anything else failed.
func Classify(code int) Outcome {
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
func Backoff(attempt int) time.Duration { return deliveryBackoff(time.Second).Delay(attempt) }

// deliveryBackoff is Backoff with its 1 s base replaced by base: a wait
// d = base, 2·base, … 60·base taken at random from its upper half
// [d/2, d], which is 3d/4 with a jitter of a third.
func deliveryBackoff(base time.Duration) backoff.Backoff {
	return backoff.Backoff{Base: base * 3 / 4, Max: base * 45, Jitter: 1.0 / 3}
}

// CheckURL validates a callback URL when a subscription is made: absolute
// http(s) with a host, and a host and addresses the policy allows — an
// address literal as it stands, a host name by what it resolves to now
// (the dialer checks again at delivery time). Violations are
// errdefs.ErrInvalid naming the reason.
func (d *Deliverer) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return errdefs.Invalid("callback-url %q is not an absolute http(s) URL", raw)
	}
	port, err := urlPort(u)
	if err != nil {
		return errdefs.Invalid("callback-url %q has an invalid port", raw)
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		return refusal(raw, d.policy.checkAddr(ip, port, false))
	}
	trusted, err := d.policy.checkHost(host)
	if err != nil {
		return refusal(raw, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := d.resolver.LookupNetIP(rctx, "ip", normalHost(host))
	if err != nil && trusted {
		return nil // named by the operator; the dialer still keeps it off the orchestrator
	}
	if err != nil {
		return errdefs.InvalidWrap(err, "callback-url host %q cannot be resolved", host)
	}
	if len(addrs) == 0 {
		return errdefs.Invalid("callback-url host %q has no address", host)
	}
	for _, ip := range addrs {
		if err := d.policy.checkAddr(ip, port, trusted); err != nil {
			return refusal(raw, err)
		}
	}
	return nil
}

func refusal(raw string, err error) error {
	var refused *RefusedError
	if errors.As(err, &refused) {
		return errdefs.Invalid("callback-url %q is refused: %s", raw, refused.Reason)
	}
	return err
}

// urlPort is the port a URL dials: its own, or its scheme's.
func urlPort(u *url.URL) (uint16, error) {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return uint16(n), err
}

// trustedHostKey marks a request to a host --callback-allow names.
type trustedHostKey struct{}
