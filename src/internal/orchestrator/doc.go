// Package orchestrator assembles the orchestrator from its parts — stores,
// catalogue, API — and runs it until its context ends. The binary's main and
// the integration tests both start it through New and Run, so tests exercise
// exactly what ships.
//
//	app, err := orchestrator.New(orchestrator.Options{Listen: ":9015", DataDir: dir})
//	go app.Run(ctx)
//	<-app.Ready()
//	addr := app.Addr()
package orchestrator
