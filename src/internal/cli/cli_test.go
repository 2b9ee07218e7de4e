package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/argus-mc/argus/src/internal/status"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Flags win over the environment, which wins over the config file; a
// token at a level hides a token file of a lower one.
func TestSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(cfg, []byte("server: http://file:1\ntoken-file: "+tokenFile+"\nrequest-timeout: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name          string
		args          []string
		env           map[string]string
		server, token string
		timeout       time.Duration
	}{
		{"file", []string{"--config", cfg}, nil, "http://file:1", "from-file", 5 * time.Second},
		{"env over file", []string{"--config", cfg}, map[string]string{"ARGUS_SERVER": "http://env:2", "ARGUS_TOKEN": "from-env"}, "http://env:2", "from-env", 5 * time.Second},
		{"flags over env", []string{"--config", cfg, "--server", "http://flag:3", "--token", "from-flag", "--request-timeout", "7s"},
			map[string]string{"ARGUS_SERVER": "http://env:2", "ARGUS_TOKEN": "from-env"}, "http://flag:3", "from-flag", 7 * time.Second},
		{"config named by the environment", nil, map[string]string{"ARGUS_CONFIG": cfg}, "http://file:1", "from-file", 5 * time.Second},
		{"defaults", nil, map[string]string{"HOME": dir}, DefaultServer, "", 30 * time.Second},
	}
	for _, c := range cases {
		var s settings
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		connectionFlags(fs, &s)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		opts, err := s.resolve(fs, env(c.env))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if opts.Server != c.server || opts.Token != c.token || opts.Timeout != c.timeout {
			t.Errorf("%s: server %q token %q timeout %s", c.name, opts.Server, opts.Token, opts.Timeout)
		}
	}
	// A config file named but missing, or with unknown keys, is an error.
	for _, content := range []string{"", "sever: typo\n"} {
		path := filepath.Join(dir, "bad.yaml")
		if content != "" {
			_ = os.WriteFile(path, []byte(content), 0o600)
		}
		var s settings
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		connectionFlags(fs, &s)
		_ = fs.Parse([]string{"--config", path})
		if _, err := s.resolve(fs, env(nil)); err == nil {
			t.Errorf("config %q accepted", content)
		}
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"status"}, {"status", "a/b/c"}, {"status", "a/b/c/d", "--instance", "1"}, {"status", "a//c/d"},
		{"wait", "a/b/c/d", "--for", "healthy"}, {"status", "a/b/c/d", "-o", "xml"}, {"nope"},
		{"status", "a/b/c/d", "--server", "ftp://x"},
	} {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), Options{Args: args, Stdout: &out, Stderr: &errOut}); code != ExitError || errOut.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}

func resource(kind, name string, ready string, owners ...status.Owner) *node {
	group := ""
	if kind == "Deployment" || kind == "ReplicaSet" || kind == "StatefulSet" {
		group = "apps"
	}
	return &node{kind: kind, name: name, namespace: "default", resourceGroup: group, ready: ready, owners: owners}
}

func owner(kind, name string) status.Owner {
	group := "apps"
	if kind == "Job" {
		group = "batch"
	}
	return status.Owner{GVK: status.GVK{Group: group, Version: "v1", Kind: kind}, Name: name}
}

// Pods hang under their ReplicaSet (a line of its own) under their
// Deployment; a StatefulSet's and a Job's directly; an unlisted owner
// alone leaves a resource at the top.
func TestClusterTree(t *testing.T) {
	top := clusterTree([]*node{
		resource("Pod", "web-7d9c-b", "Failed", owner("ReplicaSet", "web-7d9c"), owner("Deployment", "web")),
		resource("Service", "web", "Ready"),
		resource("Deployment", "web", "Failed"),
		resource("Pod", "web-7d9c-a", "Ready", owner("ReplicaSet", "web-7d9c"), owner("Deployment", "web")),
		resource("StatefulSet", "db", "Ready"),
		resource("Pod", "db-0", "Ready", owner("StatefulSet", "db")),
		resource("Pod", "orphan", "Ready", owner("Job", "gone")),
	})
	var b strings.Builder
	var walk func(prefix string, l []*node)
	walk = func(prefix string, l []*node) {
		for _, n := range l {
			b.WriteString(prefix + n.kind + "/" + n.name + "\n")
			walk(prefix+"  ", n.children)
		}
	}
	walk("", top)
	want := `Deployment/web
  ReplicaSet/web-7d9c
    Pod/web-7d9c-a
    Pod/web-7d9c-b
Pod/orphan
Service/web
StatefulSet/db
  Pod/db-0
`
	if b.String() != want {
		t.Fatalf("tree:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestSeverityOrder(t *testing.T) {
	order := [][2]string{{"Failed", ""}, {"NotPresent", "Missing"}, {"Ready", "OutOfSync"}, {"Pending", ""}, {"Unknown", "Unknown"}, {"Ready", "Synced"}}
	for i := 1; i < len(order); i++ {
		if severity(order[i-1][0], order[i-1][1]) >= severity(order[i][0], order[i][1]) {
			t.Errorf("%v is not worse than %v", order[i-1], order[i])
		}
	}
}

func TestOwnersFromObject(t *testing.T) {
	pod := json.RawMessage(`{"metadata":{"labels":{"pod-template-hash":"7d9c"},"ownerReferences":[
		{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9c","controller":true}]}}`)
	got := ownersFromObject(pod)
	if len(got) != 2 || got[0].Name != "web-7d9c" || got[1].GVK.Kind != "Deployment" || got[1].Name != "web" {
		t.Fatalf("owners %+v", got)
	}
	if got := ownersFromObject(json.RawMessage(`{"metadata":{}}`)); got != nil {
		t.Fatalf("no owners: %+v", got)
	}
}

func TestLocalTimes(t *testing.T) {
	loc := time.FixedZone("CET", 3600)
	got := localTimes("monitor silent since 2026-01-01T10:00:00Z; and 2026-01-01T10:00:00.5+02:00", loc)
	if got != "monitor silent since 2026-01-01 11:00:00 CET; and 2026-01-01 09:00:00 CET" {
		t.Fatalf("%q", got)
	}
}
