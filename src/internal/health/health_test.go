package health

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// A case from testdata/<kind>.yaml: the object, the status it must get, and
// a substring its reason must contain ("" with noReason: a plain Ready).
type evalCase struct {
	Name     string          `json:"name"`
	Want     Status          `json:"want"`
	Reason   string          `json:"reason"`
	NoReason bool            `json:"noReason"`
	Object   json.RawMessage `json:"object"`
}

func TestEvaluateFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/rules/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cases []evalCase
		if err := yaml.UnmarshalStrict(data, &cases); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range cases {
			seen++
			t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml")+"/"+tc.Name, func(t *testing.T) {
				// Decode as client-go does, so numbers are int64 as in real objects.
				obj, _, err := unstructured.UnstructuredJSONScheme.Decode(tc.Object, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := Evaluate(obj.(*unstructured.Unstructured))
				if got.Status != tc.Want {
					t.Fatalf("status = %s (%q), want %s", got.Status, got.Reason, tc.Want)
				}
				if !strings.Contains(got.Reason, tc.Reason) {
					t.Fatalf("reason = %q, want it to contain %q", got.Reason, tc.Reason)
				}
				if tc.NoReason && got.Reason != "" {
					t.Fatalf("reason = %q, want none", got.Reason)
				}
				if got.Status != Ready && got.Reason == "" {
					t.Fatalf("%s without a reason", got.Status)
				}
			})
		}
	}
	t.Logf("%d fixture cases", seen)
}

type aggregateCase struct {
	Name string   `json:"name"`
	In   []Status `json:"in"`
	Want Status   `json:"want"`
}

func TestAggregateFixtures(t *testing.T) {
	data, err := os.ReadFile("testdata/aggregate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []aggregateCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if got := Aggregate(tc.In...); got != tc.Want {
			t.Errorf("%s: Aggregate(%v) = %s, want %s", tc.Name, tc.In, got, tc.Want)
		}
	}
}

func TestSummarize(t *testing.T) {
	items := []Item{
		{"Deployment", "fw0-sink", Result{Pending, "1 of 2 replicas ready"}},
		{"ConfigMap", "cfg", Result{Ready, ""}},
		{"Pod", "fw0-sink-0", Result{Failed, "container sink: CrashLoopBackOff"}},
		{"Service", "svc", Result{Pending, "waiting for a load balancer address"}},
	}
	got := Summarize(items, 2)
	want := "pod fw0-sink-0: container sink: CrashLoopBackOff; deployment fw0-sink: 1 of 2 replicas ready; and 1 more"
	if got != want {
		t.Fatalf("Summarize = %q\nwant        %q", got, want)
	}
	if got := Summarize(items[1:2], 5); got != "" {
		t.Fatalf("all ready: %q", got)
	}
}

type workloadCase struct {
	Name string `json:"name"`
	Own  struct {
		Status Status `json:"status"`
		Reason string `json:"reason"`
	} `json:"own"`
	Pods []struct {
		Name   string `json:"name"`
		Status Status `json:"status"`
		Reason string `json:"reason"`
	} `json:"pods"`
	Want struct {
		Status Status `json:"status"`
		Reason string `json:"reason"`
	} `json:"want"`
}

func TestWorkloadFixtures(t *testing.T) {
	data, err := os.ReadFile("testdata/workload.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []workloadCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		var pods []Item
		for _, p := range tc.Pods {
			pods = append(pods, Item{Kind: "Pod", Name: p.Name, Result: Result{p.Status, p.Reason}})
		}
		got := Workload(Result{tc.Own.Status, tc.Own.Reason}, pods)
		if got.Status != tc.Want.Status || got.Reason != tc.Want.Reason {
			t.Errorf("%s: %+v, want %+v", tc.Name, got, tc.Want)
		}
	}
	if len(cases) < 5 {
		t.Fatalf("only %d cases", len(cases))
	}
}
