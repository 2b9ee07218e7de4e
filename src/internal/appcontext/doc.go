// Package appcontext keeps the runtime state of each instantiation (an
// "AppContext") in etcd: what was rendered for every app and cluster, and
// what rsync has done with each resource. Contexts outlive termination, so
// history stays queryable.
//
// Layout (see docs/appcontext.md), under a prefix (default "/argus"):
//
//	/meta/<id>                                                Meta (JSON), written once
//	/status/<id>                                              Status (JSON)
//	/ctx/<id>/app/<app>/cluster/<provider>+<cluster>/res/<Kind>/<namespace|_>/<name>/manifest
//	/ctx/<id>/app/<app>/cluster/<provider>+<cluster>/res/<Kind>/<namespace|_>/<name>/status
//
// A manifest is written once; its status key is written on each rsync
// transition, so a status change costs one small write. A whole context is
// read in one transaction (two gets and one range read), and every context's
// meta and status with two range reads; never key by key.
package appcontext
