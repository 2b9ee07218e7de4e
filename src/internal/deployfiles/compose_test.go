package deployfiles

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose loads deployments/docker-compose.yaml as `docker compose`
// would: schema validation, interpolation (with an empty environment, so
// the host's variables cannot change the result), normalisation and paths
// resolved against the file's directory.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	file := repoPath(t, "deployments", "docker-compose.yaml")
	opts, err := cli.NewProjectOptions([]string{file},
		cli.WithWorkingDirectory(filepath.Dir(file)),
		cli.WithResolvedPaths(true),
		cli.WithConsistency(true),
		cli.WithProfiles(profiles))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("load %s: %v", file, err)
	}
	return project
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// flagArg returns the value of --name=value in a command line.
func flagArg(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// mountedVolume returns the named volume mounted at target, "" if none.
func mountedVolume(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Target == target {
			return v.Source
		}
	}
	return ""
}

func hostPort(t *testing.T, raw string) (host, port string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse %q: %v", raw, err)
	}
	return u.Hostname(), u.Port()
}

// checkComposeStores: the stores have pinned images, data on named
// volumes, and health checks the orchestrator's start waits for.
func checkComposeStores(t *testing.T, p *types.Project, etcd, mongo types.ServiceConfig) {
	t.Helper()
	if etcd.Image != "quay.io/coreos/etcd:v3.6.4" {
		t.Errorf("etcd image %q", etcd.Image)
	}
	if mongo.Image != "mongo:7" {
		t.Errorf("mongodb image %q", mongo.Image)
	}
	etcdDataDir := flagArg(etcd.Command, "data-dir")
	if etcdDataDir == "" || mountedVolume(etcd, etcdDataDir) == "" {
		t.Errorf("etcd --data-dir=%q is not on a named volume (volumes %+v)", etcdDataDir, etcd.Volumes)
	}
	if mountedVolume(mongo, "/data/db") == "" {
		t.Errorf("mongodb's /data/db is not on a named volume (volumes %+v)", mongo.Volumes)
	}
	for _, s := range []types.ServiceConfig{etcd, mongo} {
		if hc := s.HealthCheck; hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] != "CMD" {
			// Exec form: the etcd image is distroless, with no shell for CMD-SHELL.
			t.Errorf("%s: health check %+v, want an exec-form test", s.Name, hc)
		}
		if s.Restart == "" || s.Restart == types.RestartPolicyNo {
			t.Errorf("%s: restart policy %q", s.Name, s.Restart)
		}
	}
	for _, v := range []string{mountedVolume(etcd, etcdDataDir), mountedVolume(mongo, "/data/db")} {
		if _, ok := p.Volumes[v]; v != "" && !ok {
			t.Errorf("volume %s is used but not declared", v)
		}
	}
}

func TestCompose(t *testing.T) {
	p := loadCompose(t)
	if got, want := p.ServiceNames(), []string{"etcd", "mongodb", "orchestrator"}; !slices.Equal(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	etcd, mongo, orch := service(t, p, "etcd"), service(t, p, "mongodb"), service(t, p, "orchestrator")

	checkComposeStores(t, p, etcd, mongo)

	// The orchestrator: built from the repository's Dockerfile.
	if orch.Image != "argus:latest" {
		t.Errorf("orchestrator image %q", orch.Image)
	}
	if orch.Build == nil {
		t.Fatal("orchestrator has no build section")
	}
	if root := repoPath(t); orch.Build.Context != root {
		t.Errorf("build context %s, want the repository root %s", orch.Build.Context, root)
	}
	if _, err := os.Stat(filepath.Join(orch.Build.Context, orch.Build.Dockerfile)); err != nil {
		t.Errorf("dockerfile: %v", err)
	}

	// Its stores are the two services above, at the ports they listen on.
	env := func(name string) string {
		if v := orch.Environment[name]; v != nil {
			return *v
		}
		return ""
	}
	endpoints := strings.Split(env("ARGUS_ETCD_ENDPOINTS"), ",")
	_, etcdPort := hostPort(t, flagArg(etcd.Command, "listen-client-urls"))
	for _, e := range endpoints {
		if host, port := hostPort(t, e); host != "etcd" || port != etcdPort {
			t.Errorf("etcd endpoint %q, want the etcd service on port %s", e, etcdPort)
		}
	}
	if host, port := hostPort(t, env("ARGUS_MONGO_URI")); host != "mongodb" || port != "27017" {
		t.Errorf("ARGUS_MONGO_URI %q, want the mongodb service on 27017", env("ARGUS_MONGO_URI"))
	}
	if env("ARGUS_LOG_FORMAT") != "json" {
		t.Errorf("ARGUS_LOG_FORMAT %q, want json", env("ARGUS_LOG_FORMAT"))
	}
	for _, store := range []string{"etcd", "mongodb"} {
		if d, ok := orch.DependsOn[store]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("orchestrator depends on %s with %+v, want condition %s", store, d, types.ServiceConditionHealthy)
		}
	}
	if orch.Restart == "" || orch.Restart == types.RestartPolicyNo {
		t.Errorf("orchestrator restart policy %q", orch.Restart)
	}

	// The API is published on the port it listens on.
	listen := ":9015"
	if v := env("ARGUS_LISTEN"); v != "" {
		listen = v
	}
	_, apiPort, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatal(err)
	}
	var published bool
	for _, port := range orch.Ports {
		published = published || (port.Published == "9015" && apiPort == "9015" && port.Target == 9015)
	}
	if !published {
		t.Errorf("ports %+v, want 9015 published to the API's port %s", orch.Ports, apiPort)
	}
	// With both stores external nothing writes to the root filesystem.
	if !orch.ReadOnly || env("ARGUS_ETCD_ENDPOINTS") == "" || env("ARGUS_MONGO_URI") == "" {
		t.Errorf("read_only %v with etcd %q and mongo %q, want read-only with both stores external",
			orch.ReadOnly, env("ARGUS_ETCD_ENDPOINTS"), env("ARGUS_MONGO_URI"))
	}
}

// The ha profile: two more replicas of the same orchestrator on the same
// stores, each with its own name and host port.
func TestComposeHAProfile(t *testing.T) {
	p := loadCompose(t, "ha")
	if got, want := p.ServiceNames(), []string{"etcd", "mongodb", "orchestrator", "orchestrator-2", "orchestrator-3"}; !slices.Equal(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	first := service(t, p, "orchestrator")
	ids, ports, grpcPorts := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, name := range []string{"orchestrator", "orchestrator-2", "orchestrator-3"} {
		s := service(t, p, name)
		env := func(k string) string {
			if v := s.Environment[k]; v != nil {
				return *v
			}
			return ""
		}
		for _, k := range []string{"ARGUS_ETCD_ENDPOINTS", "ARGUS_MONGO_URI", "ARGUS_MONGO_DATABASE", "ARGUS_LEASE_TTL", "ARGUS_GRPC_LISTEN"} {
			if env(k) == "" || env(k) != *first.Environment[k] {
				t.Errorf("%s: %s %q, want the first replica's", name, k, env(k))
			}
		}
		if host, port := hostPort(t, env("ARGUS_ADVERTISE_URL")); host != name || port != "9015" {
			t.Errorf("%s advertises %q, want its service name on 9015", name, env("ARGUS_ADVERTISE_URL"))
		}
		ids[env("ARGUS_REPLICA_ID")] = true
		// The REST API and the gRPC status notifications (every replica
		// serves both), each on host ports of its own.
		for _, port := range s.Ports {
			switch port.Target {
			case 9015:
				ports[port.Published] = true
			case 9016:
				grpcPorts[port.Published] = true
			}
		}
		if s.Image != first.Image || !s.ReadOnly || s.Restart != first.Restart || !reflect.DeepEqual(s.DependsOn, first.DependsOn) {
			t.Errorf("%s is not run like the first replica", name)
		}
		if name != "orchestrator" && !slices.Equal(s.Profiles, []string{"ha"}) {
			t.Errorf("%s profiles %v, want [ha]", name, s.Profiles)
		}
	}
	if len(ids) != 3 || len(ports) != 3 || len(grpcPorts) != 3 {
		t.Errorf("replica ids %v, published API ports %v and gRPC ports %v, want three distinct of each", ids, ports, grpcPorts)
	}
	for p := range ports {
		if grpcPorts[p] {
			t.Errorf("host port %s published for both the API and gRPC", p)
		}
	}
}
