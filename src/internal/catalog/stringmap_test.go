package catalog

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
)

// Keys that are not valid field names in the store (dots, a leading "$")
// are stored and read back, in both v2 and v1 objects; the JSON shape stays
// a plain object.
func TestStringMapKeepsAnyKey(t *testing.T) {
	c, ctx := newCatalogOf(t, Projects, CompositeApps, DeploymentIntentGroups, Instances)
	digs := For[DIGSpec](c, DeploymentIntentGroups)
	values := StringMap{"image.repository": "nginx", "service.port": "8080", "$weird": "x", `a\.b`: "y", "ports[0].name": "http"}
	dig := Object[DIGSpec]{Metadata: Metadata{Name: "d"}, Spec: DIGSpec{CompositeProfile: "cp",
		OverrideValues: []OverrideValue{{App: "web", Values: values}, {App: "none"}}}}
	if err := For[Empty](c, Projects).Create(ctx, Key{"p"}, Object[Empty]{Metadata: Metadata{Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	if err := For[CompositeAppSpec](c, CompositeApps).Create(ctx, Key{"p", "ca", "v1"}, Object[CompositeAppSpec]{Metadata: Metadata{Name: "ca"}, Spec: CompositeAppSpec{Version: "v1"}}); err != nil {
		t.Fatal(err)
	}
	key := Key{"p", "ca", "v1", "d"}
	if err := digs.Create(ctx, key, dig); err != nil {
		t.Fatal(err)
	}
	got, err := digs.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Spec.OverrideValues[0].Values, values) || got.Spec.OverrideValues[1].Values != nil {
		t.Fatalf("read back %+v", got.Spec.OverrideValues)
	}
	js, _ := json.Marshal(got.Spec.OverrideValues[0])
	if string(js) != `{"app":"web","values":{"$weird":"x","a\\.b":"y","image.repository":"nginx","ports[0].name":"http","service.port":"8080"}}` {
		t.Fatalf("JSON shape %s", js)
	}
	var raw bson.M
	if err := c.db.Collection(DeploymentIntentGroups.Collection).FindOne(ctx, bson.M{"deploymentintentgroup": "d"}).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	stored := raw["spec"].(bson.M)["overrideValues"].(bson.A)[0].(bson.M)["values"].(bson.A)
	if first := stored[0].(bson.M); first["k"] != "$weird" || first["v"] != "x" {
		t.Fatalf("stored as %v, want {k, v} pairs in key order", stored)
	}

	instances := For[InstanceSpec](c, Instances)
	inst := Object[InstanceSpec]{Metadata: Metadata{Name: "1"}, Spec: InstanceSpec{ID: "1", Request: InstanceRequest{
		OverrideValues: StringMap{"image.repository": "x"}, Labels: Labels{"app.kubernetes.io/name": "web"}}}}
	if err := instances.Create(ctx, Key{"1"}, inst); err != nil {
		t.Fatal(err)
	}
	gi, err := instances.Get(ctx, Key{"1"})
	if err != nil || gi.Spec.Request.OverrideValues["image.repository"] != "x" || gi.Spec.Request.Labels["app.kubernetes.io/name"] != "web" {
		t.Fatalf("instance read back %+v, %v", gi.Spec.Request, err)
	}
}

// Documents written before override values were stored as pairs (a plain
// subdocument) still load.
func TestStringMapReadsTheOldShape(t *testing.T) {
	c, ctx := newCatalogOf(t, Instances)
	old := bson.D{{Key: "instance", Value: "7"}, {Key: "metadata", Value: bson.D{{Key: "name", Value: "7"}}},
		{Key: "spec", Value: bson.D{{Key: "id", Value: "7"}, {Key: "request", Value: bson.D{
			{Key: "rbName", Value: "rb"}, {Key: "overrideValues", Value: bson.D{{Key: "replicaCount", Value: "2"}}},
			{Key: "labels", Value: bson.D{{Key: "team", Value: "a"}}}}}}}}
	if _, err := c.db.Collection(Instances.Collection).InsertOne(ctx, old); err != nil {
		t.Fatal(err)
	}
	got, err := For[InstanceSpec](c, Instances).Get(ctx, Key{"7"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Request.OverrideValues["replicaCount"] != "2" || got.Spec.Request.Labels["team"] != "a" {
		t.Fatalf("old shape read as %+v", got.Spec.Request)
	}
}

func TestStringMapRefusesOtherShapes(t *testing.T) {
	for name, v := range map[string]any{
		"a number":              bson.D{{Key: "m", Value: 3}},
		"a subdocument of ints": bson.D{{Key: "m", Value: bson.D{{Key: "a", Value: 1}}}},
		"an array of strings":   bson.D{{Key: "m", Value: bson.A{"x"}}},
		"pairs without v":       bson.D{{Key: "m", Value: bson.A{bson.D{{Key: "k", Value: "a"}}}}},
	} {
		b, _ := bson.Marshal(v)
		var out struct {
			M StringMap `bson:"m"`
		}
		if err := bson.Unmarshal(b, &out); err == nil {
			t.Errorf("%s: decoded as %v", name, out.M)
		}
	}
}

// newCatalogOf returns a catalogue of the kinds in a fresh database, with
// its etcd index on when the test runs under TestWithIndex.
func newCatalogOf(t *testing.T, kinds ...*Kind) (*Catalog, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := prepare(ctx, env.Database(t), kinds...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(t.Name(), "/indexed") {
		if _, err := c.useIndex(ctx, env.Etcd.Client, env.EtcdPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	return c, ctx
}

// Free-form JSON (subscription metadata, network specs) keeps any key at
// any depth, and subdocuments stored before load too.
func TestJSONTextKeepsAnyKey(t *testing.T) {
	type doc struct {
		Meta Values      `bson:"meta"`
		Net  NetworkSpec `bson:"net"`
	}
	in := doc{Meta: Values{"a.b": "c", "$x": map[string]any{"n.m": []any{1.5, "z", map[string]any{"k.k": true}}}},
		Net: NetworkSpec{"ipv4Subnets": []any{map[string]any{"subnet.cidr": "10.0.0.0/16"}}}}
	raw, err := bson.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var back doc
	if err := bson.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(back)
	b, _ := json.Marshal(in)
	if string(a) != string(b) {
		t.Fatalf("read back %s, want %s", a, b)
	}
	old, _ := bson.Marshal(bson.D{{Key: "meta", Value: bson.D{{Key: "n", Value: int32(3)}, {Key: "s", Value: "x"}}},
		{Key: "net", Value: bson.D{{Key: "cniType", Value: "ovn4nfv"}}}})
	var got doc
	if err := bson.Unmarshal(old, &got); err != nil || got.Meta["n"] != 3.0 || got.Meta["s"] != "x" || got.Net["cniType"] != "ovn4nfv" {
		t.Fatalf("old shape read as %#v, %v", got, err)
	}
}
