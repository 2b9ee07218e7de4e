package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/status"
)

// Bounds on what a server may send.
const (
	// MaxAnswer is the largest answer read (a status of a big fleet with
	// every pod is a few MiB).
	MaxAnswer = 64 << 20
	// DefaultTimeout bounds a request that is not a stream.
	DefaultTimeout = 30 * time.Second
)

// Options configures a Client. Server is required.
type Options struct {
	// Server is the orchestrator's base URL (http://127.0.0.1:9015).
	Server string
	// Token is the API's bearer token; empty sends none.
	Token string
	// CAFile is a PEM bundle to trust for an https Server, beside the
	// system's roots.
	CAFile string
	// Timeout bounds each request but streams; 0 means DefaultTimeout.
	Timeout time.Duration
	// UserAgent names the client; empty means "argus".
	UserAgent string
}

// Client talks to one orchestrator.
type Client struct {
	base    *url.URL
	token   string
	agent   string
	timeout time.Duration
	http    *http.Client
}

// New returns a Client.
func New(opts Options) (*Client, error) {
	if opts.Server == "" {
		return nil, errors.New("no server: set --server, ARGUS_SERVER or server: in the config file")
	}
	u, err := url.Parse(strings.TrimRight(opts.Server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q is not an http(s) URL", opts.Server)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server %q: give the token apart (--token), and no query or fragment", u.Redacted())
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", opts.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c := &Client{base: u, token: opts.Token, agent: opts.UserAgent, timeout: opts.Timeout,
		http: &http.Client{Transport: tr, CheckRedirect: sameOrigin}}
	if c.agent == "" {
		c.agent = "argus"
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	return c, nil
}

// sameOrigin follows a redirect only within the server's origin. Go's
// client keeps the Authorization header on a redirect to the same host
// name whatever its scheme or port: to http:// (the token in clear) or to
// another port of the host (another service, maybe another user's).
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	from := via[0].URL
	if !strings.EqualFold(req.URL.Scheme, from.Scheme) || !strings.EqualFold(req.URL.Host, from.Host) {
		return fmt.Errorf("refusing a redirect to %s: not the server's origin %s://%s", req.URL.Redacted(), from.Scheme, from.Host)
	}
	return nil
}

// Server is the base URL, for messages.
func (c *Client) Server() string { return c.base.String() }

// APIError is an answer other than 2xx.
type APIError struct {
	Method, Path string
	Code         int
	Message      string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Code, msg)
}

// IsCode reports an APIError with that status code.
func IsCode(err error, code int) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}

func (c *Client) request(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Request, error) {
	target := c.base.String() + path // path is escaped (Ref.Path)
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", c.agent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends a request that is not a stream and reads its answer.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &APIError{Method: method, Path: path, Code: resp.StatusCode, Message: firstLine(data)}
	}
	if len(data) > MaxAnswer {
		return nil, fmt.Errorf("%s %s: the answer is larger than %d bytes; narrow it (--app, --cluster, --resource)", method, path, MaxAnswer)
	}
	return data, nil
}

// firstLine is an error body's message, bounded.
func firstLine(data []byte) string {
	s := strings.TrimSpace(string(data))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// getJSON GETs path and decodes it into v; it returns the answer too.
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, v any) ([]byte, error) {
	data, err := c.do(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("GET %s: decode the answer: %w", path, err)
	}
	return data, nil
}

// DIGStatus is GET …/status with the query q.
func (c *Client) DIGStatus(ctx context.Context, ref Ref, q url.Values) (status.Response, []byte, error) {
	var out status.Response
	raw, err := c.getJSON(ctx, ref.Path()+"/status", q, &out)
	return out, raw, err
}

// InstanceStatus is GET /v1/instance/{id}/status.
func (c *Client) InstanceStatus(ctx context.Context, ref Ref) (status.InstanceStatus, []byte, error) {
	var out status.InstanceStatus
	raw, err := c.getJSON(ctx, ref.Path()+"/status", nil, &out)
	return out, raw, err
}

// History is GET …/status/history with filters (app, cluster, resource,
// since).
func (c *Client) History(ctx context.Context, ref Ref, q url.Values) ([]history.Entry, []byte, error) {
	var out struct {
		History []history.Entry `json:"history"`
	}
	raw, err := c.getJSON(ctx, ref.Path()+"/status/history", q, &out)
	return out.History, raw, err
}

// Overview is GET /v2/overview.
func (c *Client) Overview(ctx context.Context) (status.Overview, []byte, error) {
	var out status.Overview
	raw, err := c.getJSON(ctx, "/v2/overview", nil, &out)
	return out, raw, err
}

// Clusters is GET /v2/overview/clusters.
func (c *Client) Clusters(ctx context.Context) (status.ClusterOverview, []byte, error) {
	var out status.ClusterOverview
	raw, err := c.getJSON(ctx, "/v2/overview/clusters", nil, &out)
	return out, raw, err
}

// SyncResult is POST …/sync's answer: the context it works on and what it
// re-applies (empty when nothing drifted).
type SyncResult = deploy.SyncResult

// Sync is POST …/sync: re-apply what drifted, narrowed by app, cluster
// and resource in q.
func (c *Client) Sync(ctx context.Context, ref Ref, q url.Values) (SyncResult, []byte, error) {
	var out SyncResult
	path := ref.Path() + "/sync"
	raw, err := c.do(ctx, http.MethodPost, path, q, []byte("{}"))
	if err != nil {
		return out, nil, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, nil, fmt.Errorf("POST %s: decode the answer: %w", path, err)
	}
	return out, raw, nil
}
