package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// EachUnder reads every label of a provider's clusters, past one read's
// batch and in key order, and nothing of another provider; AliveAll
// answers for more keys than one read holds, and refuses a missing
// cluster and one being deleted. Run with and without the index.
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
			for i := range listBatch + 2 {
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
			var got []string
			err := labels.EachUnder(ctx, Key{"p"}, func(k Key, o Object[Empty]) error {
				if o.Metadata.Name != k[2] {
					return fmt.Errorf("label %v is named %q", k, o.Metadata.Name)
				}
				got = append(got, strings.Join(k, " "))
				return nil
			})
			if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("labels under p: %v (%v), want %v", got, err, want)
			}
			stop := errors.New("stop")
			if err := labels.EachUnder(ctx, Key{}, func(Key, Object[Empty]) error { return stop }); !errors.Is(err, stop) {
				t.Fatalf("f's error: %v", err)
			}

			if err := clusters.AliveAll(ctx, append(keys, Key{"q", "d"})); err != nil {
				t.Fatal(err)
			}
			if err := clusters.AliveAll(ctx, append(keys, Key{"q", "nope"})); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("a missing cluster: %v", err)
			}
			err = clusters.Delete(ctx, Key{"q", "e"}, func(ctx context.Context) error {
				if err := clusters.AliveAll(ctx, append(keys, Key{"q", "e"})); !errors.Is(err, errdefs.ErrConflict) {
					return fmt.Errorf("a cluster being deleted: %v", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
