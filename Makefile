# Argus build, test and run targets. Everything a fresh machine with Go needs
# is installed or built by these targets; see README.md.

GO       ?= go
BIN      := bin
# Built tools (Kubernetes binaries for the simulated clusters, linters) are
# cached here across clones; ARGUS_CACHE_DIR moves it.
ARGUS_CACHE_DIR ?= $(HOME)/.cache/argus
export ARGUS_CACHE_DIR
CACHE    := $(ARGUS_CACHE_DIR)
PKGS     := ./src/...
GOLANGCI_VERSION := v2.15.0
GOLANGCI := $(CACHE)/tools/golangci-lint-$(GOLANGCI_VERSION)

# Tests start real servers; give slow packages room, but never hang CI forever.
TEST_FLAGS ?= -race -count=1 -timeout 30m
FUZZTIME   ?= 60s

.PHONY: all build run demo sim ha-stores chromium test bench bench-fleet bench-push fuzz lint docs generate clean

all: build

# The web console (src/internal/console) is embedded in the orchestrator;
# bin/argus is the command-line client (docs/cli.md).
build:
	$(GO) build -o $(BIN)/orchestrator ./src/cmd/orchestrator
	$(GO) build -o $(BIN)/monitor ./src/cmd/monitor
	$(GO) build -o $(BIN)/simcluster ./src/cmd/simcluster
	$(GO) build -o $(BIN)/argus ./src/cmd/argus

# Builds kube-apiserver, kube-controller-manager, kube-scheduler (v1.34.4) and
# kwok (v0.8.0) for the simulated clusters, once: about 10 minutes cold on 2
# cores, seconds afterwards. Safe to run concurrently (flock).
sim:
	@./scripts/build-sim.sh >/dev/null

# Builds the standalone etcd (v3.6.4) and FerretDB (v1.24.0) that
# scripts/ha-up.sh runs for several replicas, once, into the same cache: a
# cold build here keeps it out of the HA test's start-up deadline.
ha-stores:
	@./scripts/build-ha.sh >/dev/null

# Runs the orchestrator on embedded stores, data kept under .argus/.
run: build
	./$(BIN)/orchestrator --data-dir .argus/data --log-format text

# Builds everything, starts two simulated clusters with a monitor each and
# the orchestrator, onboards the sample app (scripts/demo/app), shows its
# status and a notification, and stays up until Ctrl-C. DEMO_EXIT=1 checks
# every step and exits; docs/demo.md lists the other settings. The recipe
# execs the script, so make's SIGTERM reaches it; it watches make for the
# rest (docs/demo.md#stopping-it).
demo:
	@MAKE="$(MAKE)" exec ./scripts/demo/demo.sh

# The console's browser tests drive headless Chromium from the distribution's
# packages: installed here when missing, as root with apt. Elsewhere they
# skip, saying so, and this says how to install it; under CI (CI set and not
# "false", as .ci/run sets it) a browser that is missing or fails to install
# fails the run instead, naming it. APT_GET lets a check simulate a failed
# install (APT_GET=false CHROMIUM=).
CHROMIUM ?= $(firstword $(shell command -v chromium chromium-browser 2>/dev/null))
APT_GET  ?= apt-get
chromium:
	@if [ -n "$(CHROMIUM)" ] || [ -n "$$ARGUS_CHROMIUM" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v $(APT_GET) >/dev/null; then \
		echo "chromium: installing the distribution's chromium package for the console's browser tests..."; \
		if $(APT_GET) update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y -qq chromium >/dev/null && \
			command -v chromium >/dev/null; then exit 0; fi; \
		why="apt-get install chromium failed"; \
	else \
		why="chromium not found and not installable here (install the 'chromium' package, or set ARGUS_CHROMIUM)"; \
	fi; \
	case "$$CI" in ""|false|0) echo "chromium: $$why; the console's browser tests will be skipped";; \
	*) echo "chromium: $$why; CI=$$CI: the console's browser tests must run, failing" >&2; exit 1;; esac

# Integration tests run on simulated clusters (and the HA test on standalone
# stores), so their binaries come first. The e2e package, the longest by
# far, is named first so go test starts it first and the others run beside it.
# The tests' stores run in bin/simcluster's stores process, built here
# without the race detector (package storeproc says why).
E2E      := ./src/internal/e2e
test: sim ha-stores chromium
	$(GO) build -o $(BIN)/simcluster ./src/cmd/simcluster
	ARGUS_STORES_BINARY=$(abspath $(BIN)/simcluster) $(GO) test $(TEST_FLAGS) $(E2E) $(PKGS)

# Benchmarks for every performance target the issues name. The raw output
# is kept in $(BIN)/bench.txt; docs/benchmarks.md reports the numbers.
bench: sim
	@mkdir -p $(BIN)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 5x $(PKGS) | tee $(BIN)/bench.txt

# Fleet scale (issue 26): simulated pull clusters (src/internal/fleetsim,
# real agents on in-memory clusters) against one orchestrator on embedded
# stores (FLEET_REPLICAS=1) or scripts/ha-up.sh's replicas; one line
# "fleet: clusters=N replicas=R ..." per size in FLEET_SIZES
# (comma-separated). docs/benchmarks.md reports the numbers.
FLEET_SIZES    ?= 1000
FLEET_REPLICAS ?= 1
bench-fleet:
	@mkdir -p $(BIN)
	@if [ "$(FLEET_REPLICAS)" != 1 ]; then ./scripts/build-ha.sh >/dev/null; fi
	ARGUS_FLEET_SIZES=$(FLEET_SIZES) ARGUS_FLEET_REPLICAS=$(FLEET_REPLICAS) \
		$(GO) test -run '^$$' -bench BenchmarkFleet -benchtime 1x -timeout 60m ./src/internal/fleetsim | tee $(BIN)/bench-fleet.txt

# Fleet scale for push clusters (issue 26): BenchmarkHAScale, PUSH_SIZES
# API-server-only simulated clusters with monitors (about 175 MiB each)
# on three replicas (scripts/ha-up.sh); besides its metrics, one line
# "fleet: mode=push clusters=N replicas=3 ..." per size, the measures of
# bench-fleet's. PUSH_CHURN changes a minute over the fleet for
# PUSH_CHURN_S seconds. docs/benchmarks.md reports the numbers.
PUSH_SIZES   ?= 25
PUSH_CHURN   ?= 600
PUSH_CHURN_S ?= 60
bench-push: sim ha-stores
	@mkdir -p $(BIN)
	ARGUS_SCALE_CLUSTERS=$(PUSH_SIZES) ARGUS_SCALE_CHURN=$(PUSH_CHURN) ARGUS_SCALE_CHURN_S=$(PUSH_CHURN_S) \
		$(GO) test -run '^$$' -bench BenchmarkHAScale -benchtime 1x -timeout 90m $(E2E) | tee $(BIN)/bench-push.txt

# Every decoder of untrusted input has a fuzz target; the seed corpora run
# as ordinary tests in `make test`, and each target for FUZZTIME here.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzHandler -fuzztime $(FUZZTIME) ./src/internal/api
	$(GO) test -run '^$$' -fuzz FuzzJSONBody -fuzztime $(FUZZTIME) ./src/internal/api
	$(GO) test -run '^$$' -fuzz FuzzMultipart -fuzztime $(FUZZTIME) ./src/internal/api
	$(GO) test -run '^$$' -fuzz FuzzDepth -fuzztime $(FUZZTIME) ./src/internal/jsonlimit
	$(GO) test -run '^$$' -fuzz FuzzKubeconfig -fuzztime $(FUZZTIME) ./src/internal/cluster
	$(GO) test -run '^$$' -fuzz FuzzBoundedBody -fuzztime $(FUZZTIME) ./src/internal/cluster
	$(GO) test -run '^$$' -fuzz FuzzBundle -fuzztime $(FUZZTIME) ./src/internal/watcher
	$(GO) test -run '^$$' -fuzz FuzzParseQuery -fuzztime $(FUZZTIME) ./src/internal/status
	$(GO) test -run '^$$' -fuzz FuzzSubscriptionBody -fuzztime $(FUZZTIME) ./src/internal/notify
	$(GO) test -run '^$$' -fuzz FuzzInspect -fuzztime $(FUZZTIME) ./src/internal/archive
	$(GO) test -run '^$$' -fuzz FuzzOverrideValues -fuzztime $(FUZZTIME) ./src/internal/render
	$(GO) test -run '^$$' -fuzz FuzzProfileConfigResource -fuzztime $(FUZZTIME) ./src/internal/render
	$(GO) test -run '^$$' -fuzz FuzzApply -fuzztime $(FUZZTIME) ./src/internal/gac
	$(GO) test -run '^$$' -fuzz FuzzRollbackBody -fuzztime $(FUZZTIME) ./src/internal/api
	$(GO) test -run '^$$' -fuzz FuzzReport -fuzztime $(FUZZTIME) ./src/internal/fleet/hub
	$(GO) test -run '^$$' -fuzz FuzzHash -fuzztime $(FUZZTIME) ./src/internal/syncstate
	$(GO) test -run '^$$' -fuzz FuzzReadEvents -fuzztime $(FUZZTIME) ./src/internal/client

lint: $(GOLANGCI) generate
	@git diff --exit-code -- src/apis deployments/kubernetes/monitor || { echo "generated files were stale; commit the regenerated ones"; exit 1; }
	@unformatted=$$(gofmt -l src); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GOLANGCI) run $(PKGS)

$(GOLANGCI):
	@mkdir -p $(CACHE)/tools
	@echo "lint: installing golangci-lint $(GOLANGCI_VERSION) (once)..."
	GOBIN=$(CACHE)/tools/gobin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	mv $(CACHE)/tools/gobin/golangci-lint $@

# Regenerates the ResourceBundleState deepcopy code and CRD from the Go types
# (src/apis); the monitor's integration test proves the CRD keeps every field.
# Then the gRPC code of the status notifications and of the fleet protocol
# from their .proto files: protoc from the
# distribution's protobuf-compiler package (installed here when missing, as
# root with apt), the Go plugins at the versions go.mod's protobuf and grpc
# take. The generated files are committed: building needs none of this.
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.19.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTO_BIN := $(CACHE)/tools/proto-$(PROTOC_GEN_GO_VERSION)-$(PROTOC_GEN_GO_GRPC_VERSION)
generate:
	$(CONTROLLER_GEN) object crd:crdVersions=v1 paths=./src/apis/... output:crd:dir=deployments/kubernetes/monitor
	@command -v protoc >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null; } || \
		{ echo "generate: protoc not found; install the protobuf-compiler package"; exit 1; }
	@[ -x $(PROTO_BIN)/protoc-gen-go ] || GOBIN=$(PROTO_BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@[ -x $(PROTO_BIN)/protoc-gen-go-grpc ] || GOBIN=$(PROTO_BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	protoc --plugin=protoc-gen-go=$(PROTO_BIN)/protoc-gen-go --plugin=protoc-gen-go-grpc=$(PROTO_BIN)/protoc-gen-go-grpc \
		-I src/apis/statusnotify --go_out=src/apis/statusnotify --go_opt=paths=source_relative \
		--go-grpc_out=src/apis/statusnotify --go-grpc_opt=paths=source_relative statusnotify.proto
	protoc --plugin=protoc-gen-go=$(PROTO_BIN)/protoc-gen-go --plugin=protoc-gen-go-grpc=$(PROTO_BIN)/protoc-gen-go-grpc \
		-I src/apis/fleet --go_out=src/apis/fleet --go_opt=paths=source_relative \
		--go-grpc_out=src/apis/fleet --go-grpc_opt=paths=source_relative fleet.proto

# Regenerates the generated parts of docs/ (the configuration reference).
docs:
	$(GO) test ./src/cmd/orchestrator ./src/cmd/monitor -run TestConfigReferenceIsCurrent -count=1 -args -update

clean:
	rm -rf $(BIN) .argus
