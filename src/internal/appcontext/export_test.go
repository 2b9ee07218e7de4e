package appcontext

// Ready is closed once the cache holds a complete copy (its readers wait
// for that themselves; benchmarks wait before they time).
func (c *Cache) Ready() <-chan struct{} { return c.ready }
