package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// EachUnder reads every label of a provider's clusters, in one read or
// many and in key order, and nothing of another provider; AliveAll
// answers for more keys than one read holds, and names the key it
// refuses: a missing cluster, one being deleted. Run with and without
// the index.
func TestReadsOfManyObjects(t *testing.T) {
	for _, name := range []string{"mongo", "indexed"} {
		t.Run(name, func(t *testing.T) {
			c, ctx := newCatalogOf(t, ClusterProviders, Clusters, ClusterLabels)
			providers, clusters, labels := For[Empty](c, ClusterProviders), For[Empty](c, Clusters), For[Empty](c, ClusterLabels)
			obj := func(name string) Object[Empty] { return Object[Empty]{Metadata: Metadata{Name: name}} }
			for _, p := range []string{"p", "q"} {
				if err := providers.Create(ctx, Key{p}, obj(p)); err != nil {
					t.Fatal(err)
				}
			}
			var keys []Key
			var want []string
			for i := range readBatch + 2 {
				cl := fmt.Sprintf("c%02d", i)
				keys = append(keys, Key{"p", cl})
				if err := clusters.Create(ctx, Key{"p", cl}, obj(cl)); err != nil {
					t.Fatal(err)
				}
				ls := []string{"l"}
				if i == 0 {
					ls = []string{"a", "b"}
				}
				for _, l := range ls {
					if err := labels.Create(ctx, Key{"p", cl, l}, obj(l)); err != nil {
						t.Fatal(err)
					}
					want = append(want, "p "+cl+" "+l)
				}
			}
			for _, cl := range []string{"d", "e"} {
				if err := clusters.Create(ctx, Key{"q", cl}, obj(cl)); err != nil {
					t.Fatal(err)
				}
			}
			if err := labels.Create(ctx, Key{"q", "d", "x"}, obj("x")); err != nil {
				t.Fatal(err)
			}
			for _, page := range []int{eachBatch, 5} { // one read, and many
				var got []string
				err := labels.eachUnder(ctx, Key{"p"}, page, func(k Key, o Object[Empty]) error {
					if o.Metadata.Name != k[2] {
						return fmt.Errorf("label %v is named %q", k, o.Metadata.Name)
					}
					got = append(got, strings.Join(k, " "))
					return nil
				})
				if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
					t.Fatalf("labels under p, %d a read: %v (%v), want %v", page, got, err, want)
				}
			}
			stop := errors.New("stop")
			if err := labels.EachUnder(ctx, Key{}, func(Key, Object[Empty]) error { return stop }); !errors.Is(err, stop) {
				t.Fatalf("f's error: %v", err)
			}

			if key, err := clusters.AliveAll(ctx, append(keys, Key{"q", "d"})); err != nil || key != nil {
				t.Fatal(key, err)
			}
			if key, err := clusters.AliveAll(ctx, append(keys, Key{"q", "nope"})); !errors.Is(err, errdefs.ErrNotFound) || fmt.Sprint(key) != "[q nope]" {
				t.Fatalf("a missing cluster: %v %v", key, err)
			}
			err := clusters.Delete(ctx, Key{"q", "e"}, func(ctx context.Context) error {
				if key, err := clusters.AliveAll(ctx, append(keys, Key{"q", "e"})); !errors.Is(err, errdefs.ErrConflict) || fmt.Sprint(key) != "[q e]" {
					return fmt.Errorf("a cluster being deleted: %v %v", key, err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
