package hub

import (
	"context"

	"github.com/argus-mc/argus/src/internal/etcdwatch"
)

// follow hands every change under prefix to apply, in order, until ctx
// ends (etcdwatch: a broken watch is listed again and only the differences
// come, deletions included); ready is called once the first listing was
// applied.
func (h *Hub) follow(ctx context.Context, name, prefix string, apply func(etcdwatch.Event), ready func()) {
	once := false
	f, err := etcdwatch.New(etcdwatch.Options{Client: h.opts.Client, Prefixes: []string{prefix}, Name: name, Logger: h.log,
		Apply: func(b etcdwatch.Batch) {
			for _, ev := range b.Events {
				apply(ev)
			}
			if !once {
				once = true
				ready()
			}
		}})
	if err != nil { // only for missing options, which are all given
		h.log.WithError(err).Error("cannot follow " + name)
		ready()
		return
	}
	f.Run(ctx)
	if !once {
		ready()
	}
}
