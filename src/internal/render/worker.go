package render

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// WorkerArg, as the first argument of a binary, makes it a render worker:
// its main must then call WorkerMain. It is no flag, so no user sets it by
// accident, and it never appears in a usage text.
const WorkerArg = "__argus-render-worker"

// IsWorker reports whether args (os.Args[1:]) ask for a render worker.
func IsWorker(args []string) bool { return len(args) > 0 && args[0] == WorkerArg }

// exitMemory is the worker's exit code when its memory watchdog stops it.
const exitMemory = 3

// Operations a worker serves.
const (
	opPing    = "ping"
	opRender  = "render"
	opChart   = "chart"
	opProfile = "profile"
)

// request is what the pool sends; the chart and profile archives follow it
// as raw blobs, so the parent never copies them into an encoding buffer.
type request struct {
	Op          string
	ChartName   string
	ReleaseName string
	Namespace   string
	Overrides   map[string]string
	// ValuesJSON is Options.Values as JSON (gob cannot carry any-typed
	// maps without registering every type they may hold).
	ValuesJSON []byte
	Limits     archive.Limits
	MaxOutput  int64
}

// response is what a worker answers.
type response struct {
	Resources []wireResource
	// ChartName is the loaded chart's name (op chart).
	ChartName string
	// Error and Kind ("invalid", "toolarge", "limit", "notfound", "") carry
	// a failure, so the parent rebuilds the same errdefs kind.
	Error, Kind string
}

type wireResource struct {
	Group, Version, Kind, Name, Namespace string
	Manifest                              []byte
	Hook                                  *Hook
}

// Frames: an 8-byte big-endian length, then that many bytes.
func writeFrame(w io.Writer, b []byte) error {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

func readFrame(r io.Reader, limit int64) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint64(n[:])
	if size > uint64(limit) {
		return nil, fmt.Errorf("frame of %d bytes is over the limit of %d", size, limit)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decode(b []byte, v any) error { return gob.NewDecoder(bytes.NewReader(b)).Decode(v) }

// WorkerMain runs a render worker: requests on stdin, answers on file
// descriptor 3 (stdout is left to whatever a library might print, so it can
// never corrupt an answer), diagnostics on stderr. It returns the exit code.
func WorkerMain(args []string) int {
	fs := flag.NewFlagSet("render-worker", flag.ContinueOnError)
	memLimit := fs.Int64("memory-limit", DefaultMemoryLimit, "bytes of heap after which the worker stops itself")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	answers := os.NewFile(3, "answers")
	if answers == nil {
		fmt.Fprintln(os.Stderr, "render worker: no answer pipe on fd 3")
		return 2
	}
	os.Stdout = os.Stderr
	preferOOMKill()
	if *memLimit > 0 {
		// The GC works harder near the limit, so garbage alone does not
		// trip the watchdog; deep recursion fails well before the limit.
		debug.SetMemoryLimit(*memLimit * 3 / 4)
		debug.SetMaxStack(int(min(*memLimit/4, 256<<20)))
		go watchMemory(*memLimit)
	}
	if err := serve(bufio.NewReader(os.Stdin), answers); err != nil {
		fmt.Fprintln(os.Stderr, "render worker:", err)
		return 1
	}
	return 0
}

// watchMemory stops the process once its heap outgrows limit. A template
// that builds a huge string grows the heap in a few large steps, and the
// hard address-space limit the pool sets (where available) stops the step
// that would cross it; this catches the rest, race-detector builds included.
func watchMemory(limit int64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		metrics.Read(sample)
		used := sample[0].Value.Uint64() + sample[1].Value.Uint64()
		if used > uint64(limit) {
			fmt.Fprintf(os.Stderr, "render worker: memory limit of %d bytes exceeded (%d in use)\n", limit, used)
			os.Exit(exitMemory)
		}
	}
}

// serve answers requests until its input ends.
func serve(in io.Reader, out io.Writer) error {
	for {
		head, err := readFrame(in, 1<<20)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read request: %w", err)
		}
		var req request
		if err := decode(head, &req); err != nil {
			return fmt.Errorf("decode request: %w", err)
		}
		lim := req.Limits.WithDefaults()
		chartBlob, err := readFrame(in, max(lim.MaxCompressed, 0)+1)
		if err != nil {
			return fmt.Errorf("read chart: %w", err)
		}
		profileBlob, err := readFrame(in, max(lim.MaxCompressed, 0)+1)
		if err != nil {
			return fmt.Errorf("read profile: %w", err)
		}
		resp := handle(req, chartBlob, profileBlob)
		b, err := encode(resp)
		if err != nil {
			return fmt.Errorf("encode answer: %w", err)
		}
		if err := writeFrame(out, b); err != nil {
			return fmt.Errorf("write answer: %w", err)
		}
	}
}

func handle(req request, chartBlob, profileBlob []byte) (resp response) {
	var err error
	switch req.Op {
	case opPing:
	case opChart:
		var ch *chart.Chart
		if ch, err = LoadChart(chartBlob, req.ChartName, req.Limits); err == nil {
			resp.ChartName = ch.Name()
		}
	case opProfile:
		_, err = ProfileValues(profileBlob, req.Limits)
	case opRender:
		var values map[string]any
		if len(req.ValuesJSON) > 0 {
			if err := json.Unmarshal(req.ValuesJSON, &values); err != nil {
				return response{Error: "decode values: " + err.Error()}
			}
		}
		var rs []Resource
		rs, err = Render(Options{Chart: chartBlob, ChartName: req.ChartName, Profile: profileBlob, ReleaseName: req.ReleaseName,
			Namespace: req.Namespace, Overrides: req.Overrides, Values: values, Limits: req.Limits, MaxOutput: req.MaxOutput})
		for _, r := range rs {
			resp.Resources = append(resp.Resources, wireResource{Group: r.GVK.Group, Version: r.GVK.Version, Kind: r.GVK.Kind,
				Name: r.Name, Namespace: r.Namespace, Manifest: r.Manifest, Hook: r.Hook})
		}
	default:
		err = fmt.Errorf("unknown operation %q", req.Op)
	}
	if err != nil {
		resp = response{Error: err.Error(), Kind: kindOf(err)}
	}
	return resp
}

func kindOf(err error) string {
	switch {
	case errors.Is(err, ErrLimit):
		return "limit"
	case errors.Is(err, errdefs.ErrTooLarge):
		return "toolarge"
	case errors.Is(err, errdefs.ErrInvalid):
		return "invalid"
	case errors.Is(err, errdefs.ErrNotFound):
		return "notfound"
	}
	return ""
}

// errorOf rebuilds a worker's error with its kind.
func errorOf(resp response) error {
	switch resp.Kind {
	case "":
		return errors.New(resp.Error)
	case "limit":
		return LimitError("%s", resp.Error)
	case "toolarge":
		return errdefs.TooLarge("%s", resp.Error)
	case "notfound":
		return errdefs.NotFound("%s", resp.Error)
	default:
		return errdefs.Invalid("%s", resp.Error)
	}
}

// memoryArg renders the worker's memory flag.
func memoryArg(limit int64) []string {
	return []string{"-memory-limit", strconv.FormatInt(limit, 10)}
}
