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
// wherever it resolves) or neither (its addresses decide). A name that is
// an IPv4 address in one of inet_aton's shorthands (127.1, 0x7f.1,
// 2130706433, 0177.0.0.1) is refused: a resolver would take it for that
// address behind the policy's back, so it never reaches one.
func (p *policy) checkHost(host string) (trusted bool, err error) {
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return false, nil // an address: it decides
	}
	host = normalHost(host)
	if numericHost(host) {
		if ip, ok := parseShorthandIPv4(host); ok {
			return false, &RefusedError{Reason: fmt.Sprintf("host %s is the IPv4 address %s in a shorthand form; write the address as %s", host, ip, ip)}
		}
		return false, &RefusedError{Reason: fmt.Sprintf("host %s looks like an IPv4 address but is not one", host)}
	}
	if p.deny.matchHost(host) {
		return false, &RefusedError{Reason: fmt.Sprintf("host %s is denied by --callback-deny", host)}
	}
	return p.allow.matchHost(host), nil
}

// checkAddr judges the address a callback goes to. A trusted host's
// addresses are only kept off the orchestrator itself. An IPv6 address
// that carries an IPv4 address (mapped, compatible, translated, NAT64,
// 6to4, Teredo) is judged as every IPv4 address it may reach.
func (p *policy) checkAddr(ip netip.Addr, port uint16, trusted bool) error {
	ip = ip.Unmap().WithZone("")
	carried := carriedIPv4(ip)
	if len(carried) == 0 {
		return p.checkOne(ip, port, trusted)
	}
	for _, v4 := range carried {
		if err := p.checkOne(v4, port, trusted); err != nil {
			var refused *RefusedError
			if errors.As(err, &refused) {
				return &RefusedError{Reason: refused.Reason + " (carried by " + ip.String() + ")"}
			}
			return err
		}
	}
	return nil
}

// checkOne judges one address that carries no other.
func (p *policy) checkOne(ip netip.Addr, port uint16, trusted bool) error {
	for _, s := range p.self {
		if s.Port() != port {
			continue
		}
		// A listener on the unspecified address answers on every loopback
		// address, not only the 127.0.0.1 it is listed under: 127.0.0.2
		// reaches it too. And connecting to the unspecified address
		// (0.0.0.0, ::) reaches this host's listeners.
		if s.Addr() == ip || s.Addr().IsLoopback() && ip.IsLoopback() || ip.IsUnspecified() {
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

// IPv6 prefixes whose addresses carry an IPv4 address, and where.
var (
	// The well-known NAT64 prefix (RFC 6052): on an IPv6-only network
	// with a NAT64 gateway, 64:ff9b::a9fe:a9fe is 169.254.169.254.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// The local-use NAT64 prefix (RFC 8215): a network may use any
	// prefix length RFC 6052 allows within it, so each is considered
	// (but 0.0.0.0/8, which no NAT64 reaches and which is where the
	// zeros of the other lengths fall).
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	// IPv4-translated addresses (RFC 2765): ::ffff:0:a.b.c.d.
	translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	// IPv4-compatible addresses (RFC 4291, deprecated): ::a.b.c.d.
	compatible = netip.MustParsePrefix("::/96")
	// 6to4 (RFC 3056): 2002:AABB:CCDD::/48 reaches AA.BB.CC.DD.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// Teredo (RFC 4380): the server's address, and the client's
	// inverted, are in the address.
	teredo = netip.MustParsePrefix("2001::/32")
)

// rfc6052 is where RFC 6052 puts the IPv4 address for each NAT64 prefix
// length at or beyond /48: the byte offsets of its four bytes (byte 8, the
// "u" octet, is skipped).
var rfc6052 = [][4]int{{6, 7, 9, 10}, {7, 9, 10, 11}, {9, 10, 11, 12}, {12, 13, 14, 15}}

// carriedIPv4 returns the IPv4 addresses an IPv6 address carries or
// reaches, or nil when it carries none (an IPv4 address, ::, ::1).
func carriedIPv4(ip netip.Addr) []netip.Addr {
	if !ip.Is6() {
		return nil
	}
	b := ip.As16()
	at := func(i ...int) netip.Addr { return netip.AddrFrom4([4]byte{b[i[0]], b[i[1]], b[i[2]], b[i[3]]}) }
	switch {
	case nat64.Contains(ip), translated.Contains(ip):
		return []netip.Addr{at(12, 13, 14, 15)}
	case compatible.Contains(ip):
		if ip.IsUnspecified() || ip.IsLoopback() {
			return nil // :: and ::1 are IPv6's own
		}
		return []netip.Addr{at(12, 13, 14, 15)}
	case nat64Local.Contains(ip):
		var out []netip.Addr
		for _, o := range rfc6052 {
			if v4 := at(o[0], o[1], o[2], o[3]); !thisNetwork.Contains(v4) {
				out = append(out, v4)
			}
		}
		if out == nil {
			return []netip.Addr{netip.IPv4Unspecified()}
		}
		return out
	case sixToFour.Contains(ip):
		return []netip.Addr{at(2, 3, 4, 5)}
	case teredo.Contains(ip):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []netip.Addr{at(4, 5, 6, 7), netip.AddrFrom4(client)}
	}
	return nil
}

// numericHost reports a host name a URL parser or resolver would take for
// an IPv4 address: its last label is a number (decimal, 0-octal or 0x-hex),
// as the WHATWG URL standard decides.
func numericHost(host string) bool {
	labels := strings.Split(host, ".")
	last := labels[len(labels)-1]
	if last == "" && len(labels) > 1 {
		last = labels[len(labels)-2]
	}
	if hex, ok := strings.CutPrefix(strings.ToLower(last), "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// parseShorthandIPv4 parses the forms inet_aton accepts (a, a.b, a.b.c,
// a.b.c.d, each part decimal, 0-octal or 0x-hex, the last part filling the
// remaining bytes).
func parseShorthandIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, part := range parts {
		n, ok := parseNumber(part)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseNumber parses one inet_aton part: decimal, 0-prefixed octal or
// 0x-prefixed hex, no sign, at most 32 bits.
func parseNumber(s string) (uint64, bool) {
	base := 10
	switch {
	case len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X"):
		base, s = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base, s = 8, s[1:]
	}
	if s == "" {
		return 0, false
	}
	var n uint64
	for _, c := range s {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= uint64(base) {
			return 0, false
		}
		if n = n*uint64(base) + d; n > 1<<32 {
			return 0, false
		}
	}
	return n, true
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
