// Package e2e holds end-to-end tests: the orchestrator, started in-process
// on the test's embedded stores, driven over HTTP as an EMCO or k8splugin
// user would, against simulated clusters. It has no code of its own.
package e2e
