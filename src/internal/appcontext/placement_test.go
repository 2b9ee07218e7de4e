package appcontext

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Context.Placement finds every placement the builder made, whatever order
// they were made in, and nothing for an app or cluster it did not.
// Providers and names are chosen so that comparing the parts and comparing
// ClusterRef.String() disagree ("a+b" and "a-b+…").
func TestPlacementLookup(t *testing.T) {
	b := newBuilder()
	type pk struct {
		app string
		ref ClusterRef
	}
	var all []pk
	for _, app := range []string{"db", "web", "web-2"} {
		for i := range 40 {
			for _, prov := range []string{"a", "a-b", "b"} {
				all = append(all, pk{app, ClusterRef{Provider: prov, Name: fmt.Sprintf("b%02d", i)}})
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	made := map[pk]*Placement{}
	for _, k := range all[:len(all)-5] {
		made[k] = b.placement(k.app, k.ref)
	}
	for _, k := range all {
		got, want := b.ctx.Placement(k.app, k.ref), made[k]
		if got != want {
			t.Fatalf("Placement(%s, %s) = %v, want %v", k.app, k.ref, got, want)
		}
	}
	if p := b.ctx.Placement("cache", ClusterRef{Provider: "a", Name: "b01"}); p != nil {
		t.Fatalf("an app never placed: %v", p)
	}
}
