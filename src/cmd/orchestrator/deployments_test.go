package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/argus-mc/argus/src/internal/config"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// shipped is the configuration one deployment file gives the orchestrator.
type shipped struct {
	args []string
	env  map[string]string
	// files maps paths the process would read to files in the repository.
	files map[string]string
}

// kubernetesSettings reads the Deployment's args and environment; the
// config file it names is the ConfigMap generated from config.yaml, mounted
// at /etc/argus.
func kubernetesSettings(t *testing.T) shipped {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "deployments", "kubernetes", "orchestrator")
	data, err := os.ReadFile(filepath.Join(dir, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.DecodeManifests(data)
	if err != nil || len(objs) != 1 {
		t.Fatalf("deployment.yaml: %d objects, %v", len(objs), err)
	}
	containers, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	s := shipped{env: map[string]string{}, files: map[string]string{"/etc/argus/config.yaml": filepath.Join(dir, "config.yaml")}}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	s.args = args
	env, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range env {
		e := e.(map[string]any)
		v, _ := e["value"].(string)
		if _, fromRef := e["valueFrom"]; fromRef {
			v = "from-a-reference" // a Secret's value; only its presence matters here
		}
		s.env[e["name"].(string)] = v
	}
	return s
}

func composeSettings(t *testing.T) shipped {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "deployments", "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			Environment map[string]string `json:"environment"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	return shipped{env: file.Services["orchestrator"].Environment}
}

// TestShippedSettingsAreAccepted parses what the deployment files configure
// with the orchestrator's own flags. An unknown config-file key would stop
// the process at start-up, and an ARGUS_ variable that names no flag would
// be ignored without a word, so both fail here. Both stores must be
// external: these deployments keep no data of their own.
func TestShippedSettingsAreAccepted(t *testing.T) {
	for name, s := range map[string]shipped{
		"kubernetes": kubernetesSettings(t),
		"compose":    composeSettings(t),
	} {
		t.Run(name, func(t *testing.T) {
			var set settings
			fs := Flags(&set)
			for k := range s.env {
				flagName, ok := strings.CutPrefix(k, config.EnvPrefix)
				if !ok {
					continue // not for the orchestrator (POD_NAME and the like)
				}
				if f := fs.Lookup(strings.ToLower(strings.ReplaceAll(flagName, "_", "-"))); f == nil || config.EnvName(f.Name) != k {
					t.Errorf("%s sets no flag and would be ignored", k)
				}
			}
			err := config.Parse(fs, s.args, config.Sources{
				Getenv: func(k string) string { return s.env[k] },
				ReadFile: func(p string) ([]byte, error) {
					local, ok := s.files[p]
					if !ok {
						return nil, fmt.Errorf("%s is not provided by the deployment", p)
					}
					return os.ReadFile(local)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(set.endpoints) == 0 || set.opts.MongoURI == "" {
				t.Errorf("etcd endpoints %v, mongo URI %q: a store would be embedded", set.endpoints, set.opts.MongoURI)
			}
			if set.logFormat != "json" {
				t.Errorf("log format %q, want json", set.logFormat)
			}
		})
	}
}
