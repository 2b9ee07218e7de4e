package deployfiles

import (
	"encoding/json"
	"path"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
	line int
}

// stage is the instructions from one FROM to the next.
type stage struct {
	from  instruction
	insts []instruction
}

// parseDockerfile splits a Dockerfile into stages. It follows the format's
// line rules (comments, backslash continuations, comment lines inside a
// continuation), which is all these checks need; it does not expand ARGs.
func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	var (
		stages []stage
		cur    strings.Builder
		start  int
	)
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return
		}
		cmd, args, _ := strings.Cut(s, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		switch {
		case in.cmd == "FROM":
			stages = append(stages, stage{from: in})
		case len(stages) == 0:
			if in.cmd != "ARG" {
				t.Fatalf("line %d: %s before the first FROM", in.line, in.cmd)
			}
		default:
			stages[len(stages)-1].insts = append(stages[len(stages)-1].insts, in)
		}
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment, also inside a continuation
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(strings.TrimSpace(body) + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return stages
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.insts {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// flagValue returns the value of --name=value among an instruction's
// leading flags (COPY --from=build --chown=...).
func flagValue(args, name string) string {
	for _, f := range strings.Fields(args) {
		if !strings.HasPrefix(f, "--") {
			break
		}
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// copyOperands returns a COPY's sources and destination, flags dropped.
func copyOperands(args string) (srcs []string, dest string) {
	var ops []string
	for _, f := range strings.Fields(args) {
		if strings.HasPrefix(f, "--") && len(ops) == 0 {
			continue
		}
		ops = append(ops, f)
	}
	if len(ops) < 2 {
		return nil, ""
	}
	return ops[:len(ops)-1], ops[len(ops)-1]
}

// image is what the Dockerfile says about the final image.
type image struct {
	binaries   map[string]bool // absolute paths of the copied binaries
	user       string
	entrypoint []string
	env        map[string]string
	chowned    map[string]string // destination -> --chown value
}

// loadImage parses the repository's Dockerfile and checks the properties
// the deployment files rely on; the Kubernetes and compose tests use the
// result to cross-check binary paths.
func loadImage(t *testing.T) image {
	t.Helper()
	stages := parseDockerfile(t, readFile(t, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a final stage", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	// Build: static, reproducible binaries from cached modules.
	if !strings.Contains(build.from.args, "golang:") || !strings.HasSuffix(build.from.args, " AS build") {
		t.Errorf("line %d: first stage is %q, want golang:... AS build", build.from.line, build.from.args)
	}
	var built bool
	for _, run := range build.all("RUN") {
		if !strings.Contains(run.args, "go build") {
			continue
		}
		built = true
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w"`, "./src/cmd/orchestrator", "./src/cmd/monitor", "./src/cmd/argus",
			"--mount=type=cache,target=/go/pkg/mod", "--mount=type=cache,target=/root/.cache/go-build"} {
			if !strings.Contains(run.args, want) {
				t.Errorf("line %d: the go build step lacks %s", run.line, want)
			}
		}
	}
	if !built {
		t.Error("no RUN ... go build in the build stage")
	}

	// Final: small, no shell, non-root.
	base := strings.Fields(final.from.args)[0]
	if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("line %d: final image is based on %s, want distroless static or scratch", final.from.line, base)
	}
	if runs := final.all("RUN"); len(runs) > 0 {
		t.Errorf("line %d: RUN in the final stage, whose base has no shell", runs[0].line)
	}
	img := image{binaries: map[string]bool{}, env: map[string]string{}, chowned: map[string]string{}}
	for _, in := range final.insts {
		switch in.cmd {
		case "USER":
			img.user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &img.entrypoint); err != nil {
				t.Errorf("line %d: ENTRYPOINT is not in exec form: %v", in.line, err)
			}
		case "ENV":
			k, v, _ := strings.Cut(in.args, "=")
			img.env[k] = v
		case "COPY":
			srcs, dest := copyOperands(in.args)
			if owner := flagValue(in.args, "chown"); owner != "" {
				img.chowned[strings.TrimSuffix(dest, "/")] = owner
			}
			if strings.HasSuffix(dest, "/") {
				for _, s := range srcs {
					img.binaries[dest+path.Base(s)] = true
				}
			}
		case "EXPOSE":
			if !strings.Contains(" "+in.args+" ", " 9015 ") {
				t.Errorf("line %d: EXPOSE %s, want the API port 9015", in.line, in.args)
			}
		}
	}
	uid, _, _ := strings.Cut(img.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		// Numeric, so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
		t.Errorf("final USER %q, want a numeric non-zero uid", img.user)
	}
	for _, bin := range []string{"/usr/local/bin/orchestrator", "/usr/local/bin/monitor", "/usr/local/bin/argus"} {
		if !img.binaries[bin] {
			t.Errorf("final image lacks %s (has %v)", bin, img.binaries)
		}
	}
	if len(img.entrypoint) != 1 || img.entrypoint[0] != "/usr/local/bin/orchestrator" {
		t.Errorf("ENTRYPOINT %q, want the orchestrator", img.entrypoint)
	}
	// Embedded mode writes under the data dir, so the image's user must own it.
	dataDir := img.env["ARGUS_DATA_DIR"]
	if dataDir == "" || img.chowned[dataDir] != img.user {
		t.Errorf("ARGUS_DATA_DIR %q is not copied with --chown=%s (chowned: %v)", dataDir, img.user, img.chowned)
	}
	return img
}

func TestDockerfile(t *testing.T) {
	loadImage(t)

	// The build context must keep what the build copies and drop local data.
	ignored := map[string]bool{}
	for _, l := range strings.Split(readFile(t, ".dockerignore"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			ignored[strings.TrimSuffix(l, "/")] = true
		}
	}
	for _, keep := range []string{"*", "go.mod", "go.sum", "src"} {
		if ignored[keep] {
			t.Errorf(".dockerignore excludes %s, which the build needs", keep)
		}
	}
	for _, drop := range []string{".git", "bin", ".argus"} {
		if !ignored[drop] {
			t.Errorf(".dockerignore does not exclude %s", drop)
		}
	}
}

func TestParseDockerfile(t *testing.T) {
	stages := parseDockerfile(t, "# syntax=docker/dockerfile:1\nARG V=1\nFROM a AS b\nRUN x \\\n  # inside\n  y\n\nFROM c\nUSER 1:1\n")
	if len(stages) != 2 || stages[0].from.args != "a AS b" || stages[1].from.line != 8 {
		t.Fatalf("stages: %+v", stages)
	}
	if runs := stages[0].all("RUN"); len(runs) != 1 || runs[0].args != "x y" || runs[0].line != 4 {
		t.Errorf("continuation: %+v", runs)
	}
	if srcs, dest := copyOperands("--from=b --chown=1:1 /a /b /c/"); len(srcs) != 2 || dest != "/c/" {
		t.Errorf("copyOperands: %v %q", srcs, dest)
	}
	if v := flagValue("--from=b --chown=1:1 /a /c", "chown"); v != "1:1" {
		t.Errorf("flagValue: %q", v)
	}
}
