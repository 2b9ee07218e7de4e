// Package tgz packs the .tgz archives tests upload: charts from a
// directory or a map of files, archives entry by entry (links, devices,
// directories), the layout `tar czf x.tgz -C dir .` produces, and
// archive bombs written as streams (TinyFiles, Zeros, ZeroFiles). It imports
// nothing but the standard library, so tests that link it stay light (a
// fuzz target's speed depends on how much code its test binary links).
//
//	chart := tgz.Dir(t, "testdata/web")                       // web/Chart.yaml, ...
//	inside := tgz.FromInside(t, map[string]string{"Chart.yaml": "..."}) // ./Chart.yaml
package tgz
