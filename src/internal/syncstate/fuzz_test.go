package syncstate

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FuzzHash feeds Hash objects as a cluster might send them: any JSON,
// managed field sets included. It must never panic nor run away.
func FuzzHash(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"managedFields":[{"manager":"argus","operation":"Apply","apiVersion":"v1","fieldsV1":{"f:data":{"f:a":{}}}}]},"data":{"a":"b"}}`))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"managedFields":[{"manager":"argus","operation":"Apply","fieldsV1":{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:image":{}}}}}}]},"spec":{"containers":[{"name":"c","image":"x"}]}}`))
	f.Add([]byte(`{"metadata":{"managedFields":[{"manager":"argus","operation":"Apply","fieldsV1":{"f:a":{"v:\"x\"":{},"i:3":{},"k:{bad":{}}}}]},"a":["x"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u := &unstructured.Unstructured{}
		if u.UnmarshalJSON(data) != nil {
			return
		}
		h := Hash(u.Object)
		if h != "" && len(h) != 32 {
			t.Fatalf("hash %q", h)
		}
		if h != Hash(u.Object) {
			t.Fatal("hash not deterministic")
		}
	})
}
