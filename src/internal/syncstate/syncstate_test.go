package syncstate

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// object decodes a YAML object as client-go's unstructured decoder does
// (whole numbers as int64).
func object(t *testing.T, doc string) map[string]any {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u.Object
}

const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: sink
  labels: {app: sink, emco/deployment-id: 1-sink, added-by-someone: x}
  annotations: {deployment.kubernetes.io/revision: "1"}
  managedFields:
  - manager: argus
    operation: Apply
    apiVersion: apps/v1
    fieldsType: FieldsV1
    fieldsV1:
      f:metadata:
        f:labels:
          f:app: {}
          f:emco/deployment-id: {}
      f:spec:
        f:replicas: {}
        f:template:
          f:spec:
            f:containers:
              k:{"name":"main"}:
                .: {}
                f:image: {}
                f:name: {}
                f:ports:
                  k:{"containerPort":80,"protocol":"TCP"}:
                    .: {}
                    f:containerPort: {}
  - manager: kube-controller-manager
    operation: Update
    apiVersion: apps/v1
    fieldsType: FieldsV1
    fieldsV1:
      f:metadata: {f:annotations: {.: {}, f:deployment.kubernetes.io/revision: {}}}
spec:
  replicas: 1
  progressDeadlineSeconds: 600
  template:
    spec:
      containers:
      - name: main
        image: busybox:1.36
        imagePullPolicy: IfNotPresent
        ports:
        - {containerPort: 80, protocol: TCP}
`

func TestHashCoversOnlyWhatArgusManages(t *testing.T) {
	base := Hash(object(t, deployment))
	if len(base) != 32 {
		t.Fatalf("hash %q, want 32 hex digits", base)
	}
	cases := map[string]struct {
		from, to string
		same     bool
	}{
		"a defaulted field changes":              {"progressDeadlineSeconds: 600", "progressDeadlineSeconds: 300", true},
		"a controller's annotation changes":      {`revision: "1"}`, `revision: "2"}`, true},
		"another manager's label changes":        {"added-by-someone: x", "added-by-someone: y", true},
		"a field of another container's default": {"imagePullPolicy: IfNotPresent", "imagePullPolicy: Always", true},
		"the image changes":                      {"image: busybox:1.36", "image: busybox:1.37", false},
		"the replicas change":                    {"replicas: 1\n  progress", "replicas: 3\n  progress", false},
		"a label Argus applied changes":          {"app: sink,", "app: other,", false},
		"the image leaves Argus's set":           {"                f:image: {}\n", "", false},
		"the container goes away":                {"- name: main", "- name: other", false}, // the keyed element is gone
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(deployment, c.from) {
				t.Fatalf("fixture lacks %q", c.from)
			}
			got := Hash(object(t, strings.Replace(deployment, c.from, c.to, 1)))
			if (got == base) != c.same {
				t.Fatalf("hash same=%v, want same=%v", got == base, c.same)
			}
		})
	}
}

func TestHashNeedsArgusApplyEntryOfTheSameVersion(t *testing.T) {
	for name, doc := range map[string]string{
		"no argus entry":      strings.Replace(deployment, "manager: argus", "manager: kubectl", 1),
		"an Update by argus":  strings.Replace(deployment, "operation: Apply", "operation: Update", 1),
		"another api version": strings.Replace(deployment, "    apiVersion: apps/v1\n    fieldsType: FieldsV1\n    fieldsV1:\n      f:metadata:\n        f:labels", "    apiVersion: apps/v1beta2\n    fieldsType: FieldsV1\n    fieldsV1:\n      f:metadata:\n        f:labels", 1),
		"no managed fields":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
	} {
		if h := Hash(object(t, doc)); h != "" {
			t.Errorf("%s: hash %q, want none", name, h)
		}
	}
}

const secret = `
apiVersion: v1
kind: Secret
metadata:
  name: s
  managedFields:
  - manager: argus
    operation: Apply
    apiVersion: v1
    fieldsType: FieldsV1
    fieldsV1: {f:data: {f:password: {}}, f:type: {}}
type: Opaque
data: {password: c2VjcmV0}
`

func TestHashLeavesSecretValuesOut(t *testing.T) {
	a := Hash(object(t, secret))
	b := Hash(object(t, strings.Replace(secret, "c2VjcmV0", "b3RoZXI=", 1)))
	if a == "" || a != b {
		t.Fatalf("a Secret's value entered the hash: %q vs %q", a, b)
	}
	// Its keys and other fields do.
	if c := Hash(object(t, strings.Replace(secret, "type: Opaque", "type: other", 1))); c == a {
		t.Fatal("the Secret's type did not enter the hash")
	}
	// A ConfigMap's values do.
	cm := strings.NewReplacer("kind: Secret", "kind: ConfigMap", ", f:type: {}", "", "type: Opaque\n", "").Replace(secret)
	if Hash(object(t, cm)) == Hash(object(t, strings.Replace(cm, "c2VjcmV0", "b3RoZXI=", 1))) {
		t.Fatal("a ConfigMap's value did not enter the hash")
	}
}

func TestHashRefusesWhatItCannotRead(t *testing.T) {
	deep, val := "{}", "1"
	for range maxDepth + 2 {
		deep, val = `{"f:a":`+deep+`}`, `{"a":`+val+`}`
	}
	obj := mustJSON(t, val)
	obj["apiVersion"], obj["kind"] = "v1", "ConfigMap"
	obj["metadata"] = map[string]any{"managedFields": []any{
		map[string]any{"manager": "argus", "operation": "Apply", "fieldsV1": mustJSON(t, deep)}}}
	if h := Hash(obj); h != "" {
		t.Fatalf("a set deeper than %d gave hash %q", maxDepth, h)
	}
	obj["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{"manager": "argus", "operation": "Apply",
		"fieldsV1": map[string]any{"f:data": "not a set"}}}
	if h := Hash(obj); h != "" {
		t.Fatalf("a malformed set gave hash %q", h)
	}
}

func mustJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDecide(t *testing.T) {
	ok := Input{RsyncStatus: "Applied", AppliedHash: "h", Believable: true, Reports: true, Found: true, LiveHash: "h"}
	cases := map[string]struct {
		mod  func(*Input)
		want string
	}{
		"same hash":          {func(*Input) {}, Synced},
		"another hash":       {func(in *Input) { in.LiveHash = "x" }, OutOfSync},
		"no argus fields":    {func(in *Input) { in.LiveHash = "" }, OutOfSync},
		"absent":             {func(in *Input) { in.Found = false }, Missing},
		"absent, unwatched":  {func(in *Input) { in.Found, in.Unwatched = false, "forbidden" }, Unknown},
		"not believable":     {func(in *Input) { in.Believable, in.Why, in.Found = false, "cluster unreachable", false }, Unknown},
		"not applied":        {func(in *Input) { in.RsyncStatus = "Failed" }, OutOfSync},
		"nothing recorded":   {func(in *Input) { in.AppliedHash = "" }, Unknown},
		"old monitor":        {func(in *Input) { in.Reports, in.LiveHash = false, "" }, Unknown},
		"deleted by update":  {func(in *Input) { in.RsyncStatus = "Deleted" }, ""},
		"pending, unreached": {func(in *Input) { in.RsyncStatus, in.Believable = "Pending", false }, OutOfSync},
	}
	for name, c := range cases {
		in := ok
		c.mod(&in)
		got, why := Decide(in)
		if got != c.want {
			t.Errorf("%s: %s (%s), want %s", name, got, why, c.want)
		}
		if (got == Synced || got == "") != (why == "") {
			t.Errorf("%s: %s with reason %q", name, got, why)
		}
	}
	if !Drifted("Applied", Missing) || !Drifted("Applied", OutOfSync) || Drifted("Failed", OutOfSync) || Drifted("Applied", Unknown) {
		t.Error("Drifted is wrong")
	}
}
