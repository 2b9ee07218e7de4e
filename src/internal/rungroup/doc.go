// Package rungroup holds the goroutines of one Run: a component whose Run
// starts background work on demand (notify.Manager's subscription workers,
// aai.Sink's mirroring and purges) starts it through a Group, so every
// such goroutine has the run's context as owner, none starts once the run
// is stopping, and Run returns only after all have ended.
//
//	func (m *M) Run(ctx context.Context) error {
//		ctx, stop := m.group.Start(ctx)
//		defer stop()
//		... // m.group.Go(func() { work(m.group.Context()) }) from anywhere
//	}
package rungroup
