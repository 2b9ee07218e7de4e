package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/jsonlimit"
)

// nested is a JSON object whose "x" holds n nested arrays: depth n+1.
func nested(name string, n int) string {
	return `{"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `,"metadata":{"name":"` + name + `"}}`
}

func TestJSONDepthLimit(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name, body string
		code       int
		has        string
	}{
		{"5000 levels", nested("deep", 5000), 400, "nests deeper than 64 levels"},
		{"65 levels", nested("d65", 64), 400, "nests deeper than 64 levels"},
		{"64 levels", nested("d64", 63), 201, ""},
		{"brackets in strings", `{"metadata":{"name":"s1","description":"` + strings.Repeat("[{", 5000) + `"}}`, 201, ""},
		{"escaped quotes", `{"metadata":{"name":"s2","description":"\"` + strings.Repeat("[", 100) + `"}}`, 201, ""},
		{"deep and broken", strings.Repeat("[", 5000), 400, "deeper"},
	} {
		code, body, _ := f.do(t, "POST", "/v2/projects", c.body)
		if code != c.code || !strings.Contains(body, c.has) {
			t.Errorf("%s: %d %q, want %d with %q", c.name, code, body, c.code, c.has)
		}
	}
	// Subscriptions and every other JSON body go through the same decoder.
	code, body, _ := f.do(t, "POST", "/v1/rb/definition", `{"rb-name":"a","labels":`+strings.Repeat(`{"a":`, 100)+`1`+strings.Repeat("}", 100)+`}`)
	if code != 400 || !strings.Contains(body, "deeper") {
		t.Errorf("rb definition: %d %q", code, body)
	}
}

// multipartBody builds an upload from (name, content) parts.
func multipartBody(t testing.TB, parts ...[2]string) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		w, err := mw.CreateFormFile(p[0], "f")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(p[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.Bytes()
}

func TestMultipartLimits(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) { o.MaxJSONBody = 4096; o.MaxUploadBody = 1 << 20 })
	const clusters = "/v2/cluster-providers/cp1/clusters"
	okMeta := `{"metadata":{"name":"c1"}}`
	many := [][2]string{{"metadata", okMeta}}
	for i := range maxUploadParts {
		many = append(many, [2]string{fmt.Sprintf("extra%d", i), "x"})
	}
	for name, c := range map[string]struct {
		parts [][2]string
		code  int
		has   string
	}{
		"metadata over its limit": {[][2]string{{"metadata", `{"metadata":{"name":"c1","description":"` + strings.Repeat("x", 5000) + `"}}`}, {"file", "k"}}, 413, `"metadata" part is larger than 4096 bytes`},
		"deep metadata":           {[][2]string{{"metadata", nested("c1", 100)}, {"file", "k"}}, 400, "deeper than 64"},
		"two files":               {[][2]string{{"metadata", okMeta}, {"file", "a"}, {"file", "b"}}, 400, `more than one "file" part`},
		"too many parts":          {many, 400, "more than 8 parts"},
		"unknown part too large":  {[][2]string{{"junk", strings.Repeat("x", 5000)}, {"metadata", okMeta}, {"file", "k"}}, 413, `"junk" part is larger`},
		"file over the total":     {[][2]string{{"metadata", okMeta}, {"file", strings.Repeat("x", 1<<20)}}, 413, "larger than"},
		"no metadata":             {[][2]string{{"file", "k"}}, 400, `no "metadata" part`},
		"undecodable metadata":    {[][2]string{{"metadata", `{"metadata":`}, {"file", "k"}}, 422, "metadata"},
	} {
		ct, body := multipartBody(t, c.parts...)
		code, msg := f.post(t, clusters, ct, body)
		if code != c.code || !strings.Contains(msg, c.has) {
			t.Errorf("%s: %d %q, want %d with %q", name, code, msg, c.code, c.has)
		}
	}
}

// Kubeconfig uploads are refused on both APIs when they would run a
// command; the end-to-end test proves the command never runs.
func TestKubeconfigUploadsAreChecked(t *testing.T) {
	f := newFixture(t)
	f.do(t, "POST", "/v2/cluster-providers", `{"metadata":{"name":"cp1"}}`)
	kc := "apiVersion: v1\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}}}]\n" +
		"contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	ct, body := multipartBody(t, [2]string{"metadata", `{"metadata":{"name":"c1"}}`}, [2]string{"file", kc})
	if code, msg := f.post(t, "/v2/cluster-providers/cp1/clusters", ct, body); code != 400 || !strings.Contains(msg, "users[0].user.exec") {
		t.Errorf("v2 upload: %d %q", code, msg)
	}
	ct, body = multipartBody(t, [2]string{"metadata", `{"cloud-region":"r1","cloud-owner":"o"}`}, [2]string{"file", kc})
	if code, msg := f.post(t, "/v1/connectivity-info", ct, body); code != 400 || !strings.Contains(msg, "users[0].user.exec") {
		t.Errorf("v1 upload: %d %q", code, msg)
	}
	proxied := strings.Replace(kc, "'https://127.0.0.1:1'", "'https://127.0.0.1:1', proxy-url: 'http://127.0.0.1:2'", 1)
	proxied = strings.Replace(proxied, "{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}}", "{token: t}", 1)
	ct, body = multipartBody(t, [2]string{"metadata", `{"metadata":{"name":"c2"}}`}, [2]string{"file", proxied})
	if code, msg := f.post(t, "/v2/cluster-providers/cp1/clusters", ct, body); code != 400 || !strings.Contains(msg, "proxy-url") {
		t.Errorf("proxy-url: %d %q", code, msg)
	}
	// A server that is no https or http URL would fail only when used
	// (500 then): refused at upload, never dialled.
	for i, server := range []string{"file:///etc/kubernetes/admin.conf", "unix:///var/run/docker.sock"} {
		kc := strings.Replace(proxied, "'https://127.0.0.1:1', proxy-url: 'http://127.0.0.1:2'", "'"+server+"'", 1)
		ct, body = multipartBody(t, [2]string{"metadata", fmt.Sprintf(`{"metadata":{"name":"s%d"}}`, i)}, [2]string{"file", kc})
		if code, msg := f.post(t, "/v2/cluster-providers/cp1/clusters", ct, body); code != 400 || !strings.Contains(msg, "clusters[0].cluster.server") {
			t.Errorf("server %s: %d %q", server, code, msg)
		}
	}
}

// A body trickled slower than the server's read timeout ends in 408, and
// the connection is closed.
func TestSlowBodyIsRequestTimeout(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewUnstartedServer(f.srv.Config.Handler)
	srv.Config.ReadTimeout = time.Second
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v2/projects HTTP/1.1\r\nHost: argus\r\nContent-Length: 100\r\n\r\n{")
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status = %d", resp.StatusCode)
	}
}

// FuzzJSONBody: whatever the body, decoding answers a 4xx kind or
// succeeds, and never with a value nested deeper than the limit.
func FuzzJSONBody(f *testing.F) {
	for _, s := range []string{`{"metadata":{"name":"a"}}`, nested("n", 70), `{"a":"\"[[["}`, `[`, `{"a":[{"b":[{}]}]}`, "\"\\\\\"[[", ``} {
		f.Add([]byte(s))
	}
	s := &server{opts: Options{MaxJSONDepth: 8}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v any
		err := s.unmarshal(body, &v, "body")
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) && !errors.Is(err, errdefs.ErrUnprocessable) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		// What was accepted is as deep as it decoded (jsonlimit's own fuzz
		// test proves Depth right on valid JSON).
		if again, _ := json.Marshal(v); jsonlimit.Depth(again, 100) > 8 {
			t.Fatalf("accepted %q nested %d deep", body, jsonlimit.Depth(again, 100))
		}
	})
}

// FuzzMultipart: whatever the upload, decoding never panics and fails
// only with a 4xx kind; what it accepts keeps to the part limits.
func FuzzMultipart(f *testing.F) {
	ctOK, ok := multipartBody(f, [2]string{"metadata", `{"metadata":{"name":"c1"}}`}, [2]string{"file", "data"})
	boundary := strings.TrimPrefix(ctOK, "multipart/form-data; boundary=")
	f.Add(boundary, ok)
	f.Add(boundary, []byte("--"+boundary+"\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n[[[[\r\n--"+boundary+"--\r\n"))
	f.Add("b", []byte("--b\r\n\r\n--b--"))
	s := bareServer(f, Options{MaxJSONBody: 256, MaxUploadBody: 4096, MaxJSONDepth: 8})
	f.Fuzz(func(t *testing.T, boundary string, body []byte) {
		req := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=\""+strings.ReplaceAll(boundary, `"`, "")+"\"")
		var v struct {
			Metadata map[string]any `json:"metadata"`
		}
		file, err := s.decodeMultipart(httptest.NewRecorder(), req, &v, 0)
		if err != nil {
			for _, kind := range []error{errdefs.ErrInvalid, errdefs.ErrUnprocessable, errdefs.ErrTooLarge} {
				if errors.Is(err, kind) {
					return
				}
			}
			t.Fatalf("error of another kind: %v", err)
		}
		if len(file) == 0 || len(file) > 4096 {
			t.Fatalf("accepted a file of %d bytes", len(file))
		}
	})
}
