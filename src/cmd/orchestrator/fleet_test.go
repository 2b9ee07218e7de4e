package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/fleetsim"
	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

// Pull clusters' agents dialing the orchestrator over https stream on the
// fleet's own framing (the API's port, its own TLS protocol), through the
// process's real wiring; deleting a cluster ends its agent's stream (with
// its status: the agent stops, refused) and leaves the others streaming.
func TestPullClustersOverFramedTLS(t *testing.T) {
	dir := t.TempDir()
	pair := testcert.New(t, "argus")
	certFile, keyFile := pair.Write(t, dir)
	p := startProc(t, nil, nil, "--data-dir", t.TempDir(), "--tls-cert-file", certFile, "--tls-key-file", keyFile)
	defer p.terminate(t)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pair.Pool()}}}
	base := "https://" + p.addr
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tokens, err := fleetsim.Register(ctx, fleetsim.RegisterOptions{API: base, Clusters: []string{"edge01", "edge02"}, HTTP: client})
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := fleetsim.New(fleetsim.Options{Orchestrators: []string{base}, Tokens: tokens, RootCAs: pair.Pool(),
		BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- fleet.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	framedStreams := func() string {
		resp, err := client.Get(base + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for line := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, `argus_fleet_streams{transport="framed"} `); ok {
				return v
			}
		}
		return "none"
	}
	poll := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 60s (framed streams %s, agents connected %d, errors %v)\n%s",
					what, framedStreams(), fleet.Connected(), fleet.Errors(), p.log)
			}
			<-time.After(100 * time.Millisecond) // polling with a deadline
		}
	}
	poll("both agents streaming framed", func() bool { return fleet.Connected() == 2 && framedStreams() == "2" })

	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/v2/cluster-providers/fleet/clusters/edge02", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE edge02: %d", resp.StatusCode)
	}
	poll("the deleted cluster's stream ended, the other's not", func() bool { return fleet.Connected() == 1 && framedStreams() == "1" })
}
