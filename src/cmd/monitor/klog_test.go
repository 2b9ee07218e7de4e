package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/testenv"
)

// refusingKubeconfig writes a kubeconfig whose API server is a loopback
// port nothing listens on: every request is refused.
func refusingKubeconfig(t *testing.T) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://%s"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: t}}]
`, addr)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// client-go reports through klog (a reflector that cannot list); those
// lines come out in the monitor's own format, JSON here, like its own.
func TestClientGoErrorsAreStructuredLogLines(t *testing.T) {
	t.Parallel()
	p := startMonitor(t, "default", "--kubeconfig", refusingKubeconfig(t), "--log-format", "json")
	eventually(t, "a reflector error as a JSON line", func() (bool, string) {
		p.mu.Lock()
		logs := p.logs.String()
		p.mu.Unlock()
		for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
			var e map[string]any
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				return false, "not a JSON line: " + line
			}
			if e["component"] == "client-go" && e["level"] == "error" && e["msg"] == "Failed to watch" &&
				strings.Contains(fmt.Sprint(e["err"]), "connection refused") {
				return true, ""
			}
		}
		return false, logs
	})
}
