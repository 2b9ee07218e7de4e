package etcd

import "strings"

// DefaultPrefix is where Argus keeps its keys in etcd when no prefix is
// configured (--etcd-prefix).
const DefaultPrefix = "/argus"

// Prefix is the key prefix in force for a configured one: DefaultPrefix
// for "", otherwise p without trailing slashes. Every part that keeps keys
// in etcd resolves its prefix here, so the default exists once.
func Prefix(p string) string {
	if p == "" {
		p = DefaultPrefix
	}
	return strings.TrimRight(p, "/")
}
