package api

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/archive"
)

// multipartUpload is an EMCO upload whose whole body is exactly size bytes.
func multipartUpload(t *testing.T, size int) (contentType string, body []byte) {
	t.Helper()
	build := func(fileLen int) *bytes.Buffer {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		if err := mw.SetBoundary("argus-test-boundary"); err != nil {
			t.Fatal(err)
		}
		if err := mw.WriteField("metadata", `{"metadata":{"name":"c1"}}`); err != nil {
			t.Fatal(err)
		}
		fw, err := mw.CreateFormFile("file", "kubeconfig")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write(bytes.Repeat([]byte("x"), fileLen)); err != nil {
			t.Fatal(err)
		}
		if err := mw.Close(); err != nil {
			t.Fatal(err)
		}
		contentType = mw.FormDataContentType()
		return &buf
	}
	overhead := build(0).Len()
	buf := build(size - overhead)
	if buf.Len() != size {
		t.Fatalf("built %d bytes, want %d", buf.Len(), size)
	}
	return contentType, buf.Bytes()
}

func (f *fixture) post(t *testing.T, path, contentType string, body []byte) (int, string) {
	t.Helper()
	code, b, _ := f.send(t, "POST", path, bytes.NewReader(body), map[string]string{"Content-Type": contentType})
	return code, b
}

// SPEC section 9: uploads up to 64 MiB, 413 beyond. (JSON bodies over
// 1 MiB are covered by TestBadInputNeverYields500.)
func TestUploadLimit(t *testing.T) {
	f := newFixture(t)
	// A Helm chart upload; what is not a gzip archive is refused at once,
	// so the test does not wait for a parser to chew through 60 MiB.
	const apps = "/v2/projects/p1/composite-apps/ca1/v1/apps"

	// A file part is read under its kind's limit, lower than the upload
	// limit: a chart's is the archive limit, a kubeconfig's 1 MiB.
	for path, limit := range map[string]string{apps: "15728640", "/v2/cluster-providers/cp1/clusters": "1048576"} {
		ct, body := multipartUpload(t, DefaultMaxUploadBody+1024)
		code, msg := f.post(t, path, ct, body)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "larger than "+limit+" bytes") {
			t.Fatalf("%s: multipart upload just over 64 MiB: got %d %q, want 413", path, code, msg)
		}
	}

	// Below its kind's limit the upload is read whole and judged on its
	// content: this "chart" is rubbish, so 400, but never 413.
	ct, body := multipartUpload(t, archive.DefaultMaxCompressed-(1<<20))
	code, msg := f.post(t, apps, ct, body)
	if code == http.StatusRequestEntityTooLarge || code >= 500 {
		t.Fatalf("multipart upload below 64 MiB: got %d %q", code, msg)
	}

	// k8splugin's raw-body uploads are archives: the archive limit (15 MiB
	// by default, below the upload limit) refuses them as they arrive.
	if code, msg, _ := f.do(t, "POST", "/v1/rb/definition", `{"rb-name":"rb1","rb-version":"v1"}`); code != http.StatusCreated {
		t.Fatalf("create definition: %d %s", code, msg)
	}
	for _, size := range []int{DefaultMaxUploadBody + 1024, archive.DefaultMaxCompressed + 1} {
		code, msg = f.post(t, "/v1/rb/definition/rb1/v1/content", "application/octet-stream", bytes.Repeat([]byte("x"), size))
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "archive is larger than 15728640 bytes") {
			t.Fatalf("raw upload of %d bytes: got %d %q, want 413", size, code, msg)
		}
	}
}
