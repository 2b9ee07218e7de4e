// Package e2e holds end-to-end tests: the orchestrator, started in-process
// on the test's embedded stores, driven over HTTP as an EMCO or k8splugin
// user would, against simulated clusters. It has no code of its own.
//
// Every test names its lane first (lanes_test.go): sharedClusters for the
// package's two clusters, ownClusters for a test that starts clusters of
// its own, noClusters for one that writes to none. The lanes run side by
// side, each one test at a time, so a new test picks the lane of what it
// touches. A test that must not share the machine with them (the HA
// tests) says alone instead, and runs before the lanes start.
//
//	func TestSomething(t *testing.T) {
//		sharedClusters(t)
//		o := startOrchestrator(t, testenv.UniqueName("x"), "/"+testenv.UniqueName("x"))
//		onboard(t, o, nil)
//		...
//	}
package e2e
