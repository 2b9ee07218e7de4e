// Package jsonlimit measures untrusted JSON before it is decoded: the
// nesting depth of arrays and objects, found with one pass over the bytes
// and no recursion, so a body or a cluster's object can be refused before
// encoding/json recurses into it.
//
//	if jsonlimit.Depth(body, 64) > 64 { ... } // 400
package jsonlimit
