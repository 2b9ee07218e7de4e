package hub

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

type countingBlobs struct {
	reads map[string]int
	data  map[string][]byte
}

func (c *countingBlobs) ReadBlob(_ context.Context, _, sum string) ([]byte, error) {
	c.reads[sum]++
	if d, ok := c.data[sum]; ok {
		return d, nil
	}
	return nil, errors.New("not found")
}

// A small manifest is read once however many agents ask; a large one and
// a failed read are read again each time.
func TestBlobCacheReadsSmallManifestsOnce(t *testing.T) {
	src := &countingBlobs{reads: map[string]int{}, data: map[string][]byte{
		"small": []byte("kind: ConfigMap"), "large": bytes.Repeat([]byte("x"), blobCacheMax+1)}}
	c := newBlobCache(src)
	for range 3 {
		for _, sum := range []string{"small", "large", "missing"} {
			got, err := c.get(context.Background(), "ctx", sum)
			if (err == nil) != (sum != "missing") || (err == nil && !bytes.Equal(got, src.data[sum])) {
				t.Fatalf("%s: %d bytes, %v", sum, len(got), err)
			}
		}
	}
	if src.reads["small"] != 1 || src.reads["large"] != 3 || src.reads["missing"] != 3 {
		t.Fatalf("reads %v", src.reads)
	}
}
