package agent

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/loopback"
)

// endpoint is one orchestrator URL the agent may dial.
type endpoint struct {
	base     string // for the join request: scheme://host[:port]
	hostport string
	target   string // gRPC target
	tls      *tls.Config
	framed   *tls.Config // the framed stream's: tls offering pb.FramedALPN first
}

// parseEndpoint checks one --orchestrator URL: https, verified against
// roots (nil: the system's), or plain http to a loopback address only —
// decided from the URL alone, never by resolving it.
func parseEndpoint(raw string, roots *x509.CertPool) (endpoint, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" || u.Opaque != "" {
		return endpoint{}, fmt.Errorf("orchestrator URL %.200q: want http(s)://host[:port]", raw)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return endpoint{}, fmt.Errorf("orchestrator URL %.200q: only scheme, host and port are allowed", raw)
	}
	host, port := u.Hostname(), u.Port()
	switch u.Scheme {
	case "https":
		if port == "" {
			port = "443"
		}
	case "http":
		if !loopback.Host(host) {
			return endpoint{}, fmt.Errorf("orchestrator URL %.200q: plain http is allowed to loopback addresses only; use https", raw)
		}
		if port == "" {
			port = "80"
		}
	default:
		return endpoint{}, fmt.Errorf("orchestrator URL %.200q: the scheme must be https (or http to a loopback address)", raw)
	}
	hp := net.JoinHostPort(host, port)
	e := endpoint{base: u.Scheme + "://" + hp, hostport: hp}
	// gRPC's DNS resolver takes an IP as it is and tries every address a
	// name has; it is also where gRPC applies $HTTPS_PROXY.
	e.target = "dns:///" + hp
	if u.Scheme == "https" {
		// pb.ALPN first: an orchestrator that knows it serves the stream on
		// gRPC's own transport; anything else (an L7 proxy, an older
		// orchestrator) picks the "h2" gRPC appends.
		e.tls = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: host, NextProtos: []string{pb.ALPN}}
		e.framed = e.tls.Clone()
		e.framed.NextProtos = []string{pb.FramedALPN, pb.ALPN, "h2"}
	}
	return e, nil
}

func (e endpoint) transportCredentials() grpc.DialOption {
	if e.tls == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(e.tls))
}

// ParseOrchestrators checks a comma-separated list of orchestrator URLs.
func ParseOrchestrators(list string, roots *x509.CertPool) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(list, ",") {
		if strings.TrimSpace(raw) == "" {
			continue
		}
		if _, err := parseEndpoint(raw, roots); err != nil {
			return nil, err
		}
		out = append(out, strings.TrimSpace(raw))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no orchestrator URL")
	}
	return out, nil
}
