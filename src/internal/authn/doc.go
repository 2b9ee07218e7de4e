// Package authn checks API bearer tokens against a token file: one token a
// line, blank lines and lines starting with '#' ignored. Several tokens may
// be valid at once, so a client can move to a new token before the old one
// is removed; the file is re-read when its contents change (package reload),
// so rotation needs no restart. Tokens are kept only as SHA-256 digests and
// compared in constant time, and never logged.
//
//	tokens, err := authn.NewTokenFile(authn.Options{Path: "/etc/argus/tokens"})
//	ok := tokens.Valid(bearer)
package authn
