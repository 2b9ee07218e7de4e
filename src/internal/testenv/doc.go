// Package testenv starts the real components Argus's integration tests run
// against: an embedded etcd and an embedded FerretDB per test package, on free
// loopback ports in a temporary directory, torn down when the package's tests
// end, followed by a goroutine-leak check. The stores run in a process of
// their own built without the race detector (package storeproc;
// $ARGUS_STORES_BINARY, which make test sets, or built on first use), and
// so does the etcd of each set of simulated clusters.
//
//	var env *testenv.Stores
//
//	func TestMain(m *testing.M) {
//		testenv.Main(m, func(s *testenv.Stores) { env = s })
//	}
//
//	func TestX(t *testing.T) { db := env.Database(t) ... }
package testenv
