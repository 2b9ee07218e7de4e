package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrNotAllowed marks a callback address the policy refuses; a
// *RefusedError carrying it says why.
var ErrNotAllowed = errors.New("callback address not allowed")

// RefusedError is a callback address the policy refuses, with the reason.
type RefusedError struct {
	// Reason is short and safe to show to API callers, e.g.
	// "127.0.0.1 is a loopback address".
	Reason string
}

func (e *RefusedError) Error() string { return "callback refused: " + e.Reason }

// Unwrap makes errors.Is(err, ErrNotAllowed) hold.
func (e *RefusedError) Unwrap() error { return ErrNotAllowed }

// Addresses refused unless --callback-allow names them: what would let an
// API caller reach the orchestrator's host or its cloud's control plane.
// Private ranges stay allowed: in-cluster integrators live there.
var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	broadcast   = netip.MustParseAddr("255.255.255.255")
	// Instance metadata services outside the link-local range.
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("fd00:ec2::254"),   // AWS, IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
)

// policy decides where callbacks may go. For an address: the orchestrator's
// own listen addresses are always refused; otherwise the longest matching
// --callback-allow or --callback-deny prefix decides (deny wins a tie);
// otherwise the defaults refuse loopback, link-local, unspecified,
// broadcast, multicast and metadata addresses and allow the rest. A host
// name in --callback-deny is refused; one in --callback-allow is trusted
// wherever it resolves, except to the orchestrator itself.
type policy struct {
	allow, deny rules
	self        []netip.AddrPort
}

// rules are host names (exact, or "*.suffix") and address prefixes.
type rules struct {
	hosts []string
	nets  []netip.Prefix
}

func parseRules(flag string, entries []string) (rules, error) {
	var r rules
	for _, e := range entries {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return r, fmt.Errorf("%s: %q is not a CIDR: %w", flag, e, err)
			}
			r.nets = append(r.nets, p.Masked())
		default:
			if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				a = a.Unmap().WithZone("")
				r.nets = append(r.nets, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			host := normalHost(e)
			if strings.ContainsAny(host, ":/ ") || strings.Contains(strings.TrimPrefix(host, "*."), "*") {
				return r, fmt.Errorf("%s: %q is neither a host name, an address nor a CIDR", flag, e)
			}
			r.hosts = append(r.hosts, host)
		}
	}
	return r, nil
}

// matchHost reports whether the rules name host.
func (r rules) matchHost(host string) bool {
	for _, h := range r.hosts {
		if h == host || strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]) {
			return true
		}
	}
	return false
}

// longest returns the length of the longest prefix holding ip, or -1.
func (r rules) longest(ip netip.Addr) int {
	best := -1
	for _, n := range r.nets {
		if n.Contains(ip) && n.Bits() > best {
			best = n.Bits()
		}
	}
	return best
}

// CheckPolicy validates --callback-allow and --callback-deny entries, so a
// typo is a configuration error at start-up.
func CheckPolicy(allow, deny []string) error {
	_, err := newPolicy(allow, deny, nil)
	return err
}

func newPolicy(allow, deny, self []string) (*policy, error) {
	a, err := parseRules("--callback-allow", allow)
	if err != nil {
		return nil, err
	}
	d, err := parseRules("--callback-deny", deny)
	if err != nil {
		return nil, err
	}
	p := &policy{allow: a, deny: d}
	for _, s := range self {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, fmt.Errorf("own address %q: %w", s, err)
		}
		p.self = append(p.self, netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()))
	}
	return p, nil
}

// checkHost judges a host name (not an address): refused, trusted (allowed
// wherever it resolves) or neither (its addresses decide).
func (p *policy) checkHost(host string) (trusted bool, err error) {
	host = normalHost(host)
	if p.deny.matchHost(host) {
		return false, &RefusedError{Reason: fmt.Sprintf("host %s is denied by --callback-deny", host)}
	}
	return p.allow.matchHost(host), nil
}

// checkAddr judges the address a callback goes to. A trusted host's
// addresses are only kept off the orchestrator itself.
func (p *policy) checkAddr(ip netip.Addr, port uint16, trusted bool) error {
	ip = viaNAT64(ip.Unmap().WithZone(""))
	for _, s := range p.self {
		// A listener on the unspecified address answers on every loopback
		// address, not only the 127.0.0.1 it is listed under: 127.0.0.2
		// reaches it too.
		if s.Port() == port && (s.Addr() == ip || s.Addr().IsLoopback() && ip.IsLoopback()) {
			return &RefusedError{Reason: fmt.Sprintf("%s is the orchestrator's own address", netip.AddrPortFrom(ip, port))}
		}
	}
	if trusted {
		return nil
	}
	allowed, denied := p.allow.longest(ip), p.deny.longest(ip)
	if denied >= 0 && denied >= allowed {
		return &RefusedError{Reason: fmt.Sprintf("%s is denied by --callback-deny", ip)}
	}
	if allowed >= 0 {
		return nil
	}
	if kind := refusedKind(ip); kind != "" {
		return &RefusedError{Reason: fmt.Sprintf("%s is %s (--callback-allow can allow it)", ip, kind)}
	}
	return nil
}

// control is the dialer's check of each address it is about to connect
// to, after resolution: what DNS answers at delivery time is judged, not
// what it answered when the subscription was made.
func (p *policy) control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Reason: "cannot tell the address dialed"}
	}
	trusted, _ := ctx.Value(trustedHostKey{}).(bool)
	return p.checkAddr(ap.Addr(), ap.Port(), trusted)
}

// nat64 is the well-known NAT64 prefix (RFC 6052): on an IPv6-only network
// with a NAT64 gateway, 64:ff9b::a9fe:a9fe is 169.254.169.254.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// viaNAT64 returns the IPv4 address a NAT64 address reaches, else ip.
func viaNAT64(ip netip.Addr) netip.Addr {
	if !nat64.Contains(ip) {
		return ip
	}
	b := ip.As16()
	return netip.AddrFrom4([4]byte(b[12:]))
}

// refusedKind names why the defaults refuse ip, or "" when they allow it.
func refusedKind(ip netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return "an unspecified address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast():
		return "a multicast address"
	case ip == broadcast:
		return "the broadcast address"
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return "a cloud metadata address"
		}
	}
	return ""
}

// normalHost lower-cases a host name and drops a trailing dot, so that
// "LOCALHOST." and "localhost" are one name to the rules.
func normalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// SelfAddrs expands listen addresses (host:port, as net.Listener.Addr
// gives them) into the addresses that reach them: an unspecified host
// (":9015", "0.0.0.0:9015") is every address of every local interface.
func SelfAddrs(listen ...string) []string {
	var out []string
	var local []netip.Addr
	for _, l := range listen {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			continue
		}
		ip, err := netip.ParseAddr(host)
		if host != "" && err == nil && !ip.IsUnspecified() {
			out = append(out, net.JoinHostPort(ip.String(), port))
			continue
		}
		if local == nil {
			local = localAddrs()
		}
		for _, a := range local {
			out = append(out, net.JoinHostPort(a.String(), port))
		}
	}
	return out
}

func localAddrs() []netip.Addr {
	out := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
