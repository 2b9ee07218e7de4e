package fleetsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// RegisterOptions names the pull clusters to register.
type RegisterOptions struct {
	// API is the orchestrator's base URL (http://127.0.0.1:9015).
	API string
	// Provider is the cluster provider, created when missing; "fleet"
	// when empty.
	Provider string
	// Clusters are the clusters' names.
	Clusters []string
	// Label, when set, is given to every cluster (for placement).
	Label string
	// Parallel bounds the requests in flight; 8 when 0.
	Parallel int
	// HTTP is the client; a 30-second one when nil.
	HTTP *http.Client
}

// Register creates the provider and each cluster in pull mode, labelled,
// and returns every cluster's join token by name.
func Register(ctx context.Context, o RegisterOptions) (map[string]string, error) {
	if o.Provider == "" {
		o.Provider = "fleet"
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	cp := "/v2/cluster-providers"
	if err := call(ctx, o.HTTP, o.API+cp, map[string]any{"metadata": map[string]any{"name": o.Provider}}, nil, 201, 409); err != nil {
		return nil, err
	}
	tokens := make(map[string]string, len(o.Clusters))
	var mu sync.Mutex
	var firstErr error
	names := make(chan string)
	var wg sync.WaitGroup
	for range o.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				tok, err := registerOne(ctx, o, name)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				tokens[name] = tok
				mu.Unlock()
			}
		}()
	}
	for _, name := range o.Clusters {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		names <- name
	}
	close(names)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return tokens, firstErr
}

func registerOne(ctx context.Context, o RegisterOptions, name string) (string, error) {
	base := o.API + "/v2/cluster-providers/" + o.Provider + "/clusters"
	var answer struct {
		JoinToken string `json:"joinToken"`
	}
	if err := call(ctx, o.HTTP, base, map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"mode": "pull"}},
		&answer, 201); err != nil {
		return "", err
	}
	if o.Label != "" {
		if err := call(ctx, o.HTTP, base+"/"+name+"/labels", map[string]string{"clusterLabel": o.Label}, nil, 201); err != nil {
			return "", err
		}
	}
	return answer.JoinToken, nil
}

// call POSTs body as JSON and decodes the answer into out (when not nil);
// any code but those in ok is an error.
func call(ctx context.Context, c *http.Client, url string, body, out any, ok ...int) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	for _, code := range ok {
		if resp.StatusCode == code {
			if out != nil && code < 300 {
				return json.Unmarshal(answer, out)
			}
			return nil
		}
	}
	return fmt.Errorf("POST %s: %d %.200s", url, resp.StatusCode, answer)
}
