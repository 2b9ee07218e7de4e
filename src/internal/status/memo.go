package status

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/health"
)

// memo keeps, for answers from the cache, what each placement adds to an
// answer of one kind (summaryState: its counts; entriesState: its
// notification entries), per context and filters, so an answer rebuilds
// only the placements that changed since the last one: at fleet size
// (10,000 placements) rebuilding every placement was most of a summary's
// and a notification's time, however few had changed.
type memo[T any] struct {
	mu    sync.Mutex
	byKey map[memoKey]*memoed[T]
	tick  uint64
}

// memoed is a kept state and when it was last used (memo.tick).
type memoed[T any] struct {
	state *T
	used  uint64
}

// memoKey is one context's answers under one set of filters.
type memoKey struct{ context, query string }

// maxMemos bounds a memo: each kept state holds a record per placement
// of its context, and callers choose the filters.
const maxMemos = 16

// state is the memo of context id's answers to q, made (by mk) on first use.
func (m *memo[T]) state(id string, q Query, mk func() *T) *T {
	k := memoKey{context: id, query: fmt.Sprintf("%s|%q|%v|%q|%q", q.Type, q.Apps, q.Clusters, q.Resources, q.Sync)}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	if e := m.byKey[k]; e != nil {
		e.used = m.tick
		return e.state
	}
	if m.byKey == nil {
		m.byKey = map[memoKey]*memoed[T]{}
	}
	if len(m.byKey) >= maxMemos { // the least recently used goes
		var lru memoKey
		var oldest *memoed[T]
		for k, e := range m.byKey {
			if oldest == nil || e.used < oldest.used {
				lru, oldest = k, e
			}
		}
		delete(m.byKey, lru)
	}
	e := &memoed[T]{state: mk(), used: m.tick}
	m.byKey[k] = e
	return e.state
}

func newSummaryState(typ string) func() *summaryState {
	return func() *summaryState {
		return &summaryState{parts: newParts[*summaryPart](), total: newTally(typ),
			fine: map[health.Status]int{}, apps: map[string]*appParts{}}
	}
}

// summaryState is one summary's totals and what each placement added.
type summaryState struct {
	mu    sync.Mutex
	parts *parts[*summaryPart]
	pass  uint64
	// total holds the summed counts (worst and n unused: fine has them).
	total *tally
	fine  map[health.Status]int
	apps  map[string]*appParts
	// scratch is reused to build one placement at a time.
	scratch []Resource
	one     *tally
}

// appParts counts an app's placements in the answer, and those not ready.
type appParts struct{ in, notReady int }

// summaryPart is what one placement added to the summary, and what it
// was derived from.
type summaryPart struct {
	partMeta
	app      string
	included bool
	ready    bool
	counts   []count
	fine     []fineCount
}

// partKey is everything a placement's counts depend on beyond the query:
// the placement's own changes (Rev), its cluster's state as answers show
// it (not LastSeen, but whether the monitor counts as silent now), and the
// context's status and namespace.
type partKey struct {
	rev       uint64
	known     bool
	cluster   appcontext.ClusterState
	silent    bool
	ctxStatus string
	namespace string
}

// count is one value of one of the tally's maps and how often it occurs.
type count struct {
	field int // index into tally.fields
	value string
	n     int
}

type fineCount struct {
	status health.Status
	n      int
}

// fields lists the tally's count maps in a fixed order.
func (t *tally) fields() [5]map[string]int {
	return [5]map[string]int{t.byType, t.sync, t.ready, t.presence, t.emcoReady}
}

func keyOf(in Input, p *appcontext.Placement) partKey {
	st, known := in.Clusters[p.Cluster]
	k := partKey{rev: p.Rev, known: known, ctxStatus: in.Context.Status.Status, namespace: in.Context.Meta.Namespace}
	if known {
		k.silent = st.Monitor == appcontext.MonitorRunning && !st.Agent && in.SilentAfter > 0 && in.Now.Sub(st.LastSeen) > in.SilentAfter
		st.Updated = time.Time{}
		if !k.silent && st.Monitor != appcontext.MonitorSilent {
			st.LastSeen = time.Time{} // a renewal alone changes nothing; a silent monitor's reason names it
		}
		k.cluster = st
	}
	return k
}

// partMeta is what every kept part records: the key it was derived from,
// the cache's cluster generation it was last checked at, and the last
// pass that saw its placement.
type partMeta struct {
	from partKey
	gen  uint64
	seen uint64
}

// current reports, without looking its cluster up, that keyOf(in, p)
// would still be m.from: nothing of the placement or context changed and
// no cluster state changed in what keyOf reads since m was checked
// (appcontext.Cache's generation), for a cluster with no state or an
// agent's, whose silence does not depend on the time. Looking up each
// placement's cluster at each pass was most of what a notification on a
// DIG over 10,000 clusters cost.
func (m *partMeta) current(in Input, p *appcontext.Placement) bool {
	return in.clusterGen != 0 && m.gen == in.clusterGen && m.from.rev == p.Rev &&
		m.from.ctxStatus == in.Context.Status.Status && m.from.namespace == in.Context.Meta.Namespace &&
		(!m.from.known || m.from.cluster.Agent)
}

func (m *partMeta) meta() *partMeta { return m }

// parts are what each placement added to one kind of answer (a memo's
// state is for one set of filters), by placement and, for the placements
// list last walked, by index: a context's placements only grow, by
// insertion, so a list with the same first element and length is the same
// list, and a walk of it needs no lookup per placement (10,000 map
// lookups, and the filters' matching, were most of a walk that found few
// placements changed).
type parts[P interface{ meta() *partMeta }] struct {
	by map[*appcontext.Placement]P
	// list is the placements list last walked; at and selected are by
	// its index: the part (if any), whether the filters select it.
	list     []*appcontext.Placement
	at       []P
	has      []bool
	selected []bool
}

func newParts[P interface{ meta() *partMeta }]() *parts[P] {
	return &parts[P]{by: map[*appcontext.Placement]P{}}
}

// aligned reports whether pl is the list last walked.
func (ps *parts[P]) aligned(pl []*appcontext.Placement) bool {
	return len(pl) > 0 && len(pl) == len(ps.list) && &pl[0] == &ps.list[0]
}

// walk visits the placements q selects, in order, for pass: a part that is
// missing or whose key changed is derived again (derive gets the old one,
// or nil), and each part is handed to each; then the parts of placements
// gone since the last pass are handed to drop and forgotten.
func walk[P interface{ meta() *partMeta }](in Input, q Query, ps *parts[P], pass uint64,
	derive func(p *appcontext.Placement, k partKey, old P) P, each func(p *appcontext.Placement, part P), drop func(P)) {
	pl := in.Context.Placements
	aligned := ps.aligned(pl)
	var inClusters func(appcontext.ClusterRef) bool
	if !aligned {
		ps.list = pl
		ps.at, ps.has, ps.selected = make([]P, len(pl)), make([]bool, len(pl)), make([]bool, len(pl))
		inClusters = clusterMatcher(q.Clusters)
	}
	seen := 0
	for i, p := range pl {
		var part P
		var had bool
		if aligned {
			if !ps.selected[i] {
				continue
			}
			part, had = ps.at[i], ps.has[i]
		} else {
			if !match(q.Apps, p.App) || !inClusters(p.Cluster) {
				continue
			}
			ps.selected[i] = true
			part, had = ps.by[p]
		}
		if !had || !part.meta().current(in, p) {
			if k := keyOf(in, p); !had || part.meta().from != k {
				part = derive(p, k, part)
				ps.by[p] = part
			}
			part.meta().gen = in.clusterGen
		}
		ps.at[i], ps.has[i] = part, true
		part.meta().seen = pass
		seen++
		each(p, part)
	}
	for p, part := range ps.by {
		if seen == len(ps.by) {
			break // none gone: no need to look at them all
		}
		if part.meta().seen != pass {
			drop(part)
			delete(ps.by, p)
		}
	}
}

// entriesState is one context's notification entries under one set of
// filters (Entries), placement by placement.
type entriesState struct {
	mu    sync.Mutex
	parts *parts[*entriesPart]
	pass  uint64
	n     int
}

type entriesPart struct {
	partMeta
	entries []Entry
}

func newEntriesState() *entriesState {
	return &entriesState{parts: newParts[*entriesPart]()}
}

// entries is Entries(in, q) in runs, one a placement, placements
// unchanged since the last call answered from the memo: their runs are the
// ones handed out before (see Runs). The entries are shared: callers must
// not change them.
func (s *entriesState) entries(in Input, q Query) Runs {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pass++
	out := make(Runs, 0, s.n)
	// Build lists apps by name and each app's clusters in placement
	// order; the cache keeps placements sorted by app, so in placement
	// order unless they are not.
	var byApp []appEntries
	if !slices.IsSortedFunc(in.Context.Placements, func(a, b *appcontext.Placement) int { return strings.Compare(a.App, b.App) }) {
		byApp = []appEntries{}
	}
	walk(in, q, s.parts, s.pass,
		func(p *appcontext.Placement, k partKey, _ *entriesPart) *entriesPart {
			return &entriesPart{partMeta: partMeta{from: k}, entries: placementEntries(in, q, p)}
		},
		func(p *appcontext.Placement, part *entriesPart) {
			switch {
			case len(part.entries) == 0:
			case byApp != nil:
				byApp = append(byApp, appEntries{app: p.App, entries: part.entries})
			default:
				out = append(out, part.entries)
			}
		},
		func(*entriesPart) {})
	slices.SortStableFunc(byApp, func(a, b appEntries) int { return strings.Compare(a.app, b.app) })
	for _, a := range byApp {
		out = append(out, a.entries)
	}
	if s.n = len(out); s.n == 0 {
		return nil // as Entries
	}
	return out
}

type appEntries struct {
	app     string
	entries []Entry
}

// placementEntries is one placement's part of Entries.
func placementEntries(in Input, q Query, p *appcontext.Placement) []Entry {
	if left(p) {
		return nil
	}
	q.Type, q.Output = TypeCluster, OutputDetail
	in.withRsync = true
	c := buildCluster(in, q, p, nil)
	if filteredOut(q, &c) {
		return nil
	}
	return appendEntries(make([]Entry, 0, len(c.Resources)), p.App, c)
}

// summarize fills resp's counts for q from the memo: placements whose key
// is unchanged keep their part, the others are built again and the
// totals adjusted; placements gone since the last summary are taken out.
// It returns the counts (the caller's to keep), whether every app counted
// is ready and how many apps count.
func (s *summaryState) summarize(in Input, q Query) (t *tally, allReady bool, apps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pass++
	walk(in, q, s.parts, s.pass,
		func(p *appcontext.Placement, k partKey, old *summaryPart) *summaryPart {
			if old != nil {
				s.apply(old, -1)
			}
			part := s.derive(in, q, p, k)
			s.apply(part, 1)
			return part
		},
		func(*appcontext.Placement, *summaryPart) {},
		func(part *summaryPart) { s.apply(part, -1) })
	allReady = true
	for _, a := range s.apps {
		if a.in > 0 {
			apps++
			allReady = allReady && a.notReady == 0
		}
	}
	return s.snapshot(q.Type), allReady, apps
}

// derive builds one placement as Build would and keeps what it adds.
func (s *summaryState) derive(in Input, q Query, p *appcontext.Placement, k partKey) *summaryPart {
	part := &summaryPart{partMeta: partMeta{from: k}, app: p.App}
	if left(p) {
		return part
	}
	c := buildCluster(in, q, p, s.scratch)
	s.scratch = c.Resources[:0]
	if filteredOut(q, &c) {
		return part
	}
	part.included = true
	if s.one == nil {
		s.one = newTally(q.Type)
	}
	for _, m := range s.one.fields() {
		clear(m)
	}
	part.ready = s.one.add(&c)
	for i, m := range s.one.fields() {
		for v, n := range m {
			part.counts = append(part.counts, count{field: i, value: v, n: n})
		}
	}
	if q.Type == TypeCluster {
		fine := map[health.Status]int{}
		for i := range c.Resources {
			fine[health.Status(c.Resources[i].fine)]++
		}
		for st, n := range fine {
			part.fine = append(part.fine, fineCount{status: st, n: n})
		}
	}
	return part
}

// apply adds (sign 1) or removes (sign -1) a part from the totals; a
// count that reaches zero goes, as a fresh build would not have it.
func (s *summaryState) apply(part *summaryPart, sign int) {
	if !part.included {
		return
	}
	fields := s.total.fields()
	for _, c := range part.counts {
		m := fields[c.field]
		if m[c.value] += sign * c.n; m[c.value] == 0 {
			delete(m, c.value)
		}
	}
	for _, f := range part.fine {
		if s.fine[f.status] += sign * f.n; s.fine[f.status] == 0 {
			delete(s.fine, f.status)
		}
	}
	a := s.apps[part.app]
	if a == nil {
		a = &appParts{}
		s.apps[part.app] = a
	}
	a.in += sign
	if !part.ready {
		a.notReady += sign
	}
	if a.in == 0 {
		delete(s.apps, part.app)
	}
}

// snapshot is the totals as a tally the caller may keep (the memo's maps
// change with the next summary).
func (s *summaryState) snapshot(typ string) *tally {
	t := &tally{typ: typ, byType: maps.Clone(s.total.byType), sync: maps.Clone(s.total.sync), ready: maps.Clone(s.total.ready),
		presence: maps.Clone(s.total.presence), emcoReady: maps.Clone(s.total.emcoReady), worst: health.Ready}
	for st, n := range s.fine {
		t.worst = health.Aggregate(t.worst, st)
		t.n += n
	}
	return t
}
