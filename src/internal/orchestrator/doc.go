// Package orchestrator assembles the orchestrator from its parts — stores,
// catalogue, the work that replicas share, API — and runs it until its
// context ends. The binary's main and the integration tests both start it
// through New and Run, so tests exercise exactly what ships.
//
// Run goes through phases, each in a file of its own (listen.go,
// stores.go, work.go, serve.go); each phase adds what it builds to one
// lifecycle (lifecycle.go), which starts the parts' goroutines in the
// order they were added and, however Run ends, stops the parts in reverse.
//
//	app, err := orchestrator.New(orchestrator.Options{Listen: ":9015", DataDir: dir})
//	go app.Run(ctx)
//	<-app.Ready()
//	addr := app.Addr()
package orchestrator
