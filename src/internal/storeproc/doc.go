// Package storeproc runs the embedded stores — etcd (server/v3/embed) and
// FerretDB on SQLite, opened by packages store/etcd and store/mongo as the
// orchestrator's local mode opens them — in a process of their own, for
// tests.
//
// Why a process: `make test` builds every test binary with the race
// detector, and the stores embedded in one are instrumented with it too.
// That tests none of our code and made FerretDB's SQLite more than half of
// the CPU an upload test used. A helper built without it (`simcluster
// stores`) serves the same stores to the race-built tests, which reach them
// as any client does.
package storeproc
