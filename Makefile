# meshdrain's build. `make help` lists the targets.
SHELL := /bin/bash
# RELEASE is the version this tree releases: the image tag of examples/ and of plan's default
# --image (examples_test checks that they agree). VERSION is what the binary reports.
RELEASE := v0.1.0
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo $(RELEASE)-dev)
IMAGE ?= ghcr.io/meshdrain/meshdrain:$(RELEASE)
LDFLAGS := -s -w -X github.com/meshdrain/meshdrain/pkg/cli.Version=$(VERSION)
BIN := bin/meshdrain
SIM_BIN := bin/meshdrain-sim
GO ?= go

FUZZTIME ?= 30s
# Each fuzz target as package:Name. Their seeds (testdata/fuzz) run with every `go test`.
FUZZ_TARGETS := ./pkg/mesh/envoy:FuzzParse ./pkg/mesh/envoy:FuzzStatsFilter ./pkg/mesh/envoy:FuzzReadResponse ./pkg/cli:FuzzPrestopConfig

.PHONY: help build test test-race test-loaded lint subjects demo clean image faults fuzz bench calibrate

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

build: ## Build the pod binary (bin/meshdrain: static, stripped) and the test world (bin/meshdrain-sim)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/meshdrain
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(SIM_BIN) ./cmd/meshdrain-sim

# The simulations keep pod time on real timers: they run after the rest, one package at a
# time, so that the other packages' tests do not starve them on a 2-core machine. On a busy
# machine their replays at larger time scales take longer than go test's 10-minute default.
SIM_PKGS := ./pkg/sim/podsim ./pkg/sim/simcli

test: lint ## Run every test (unit, integration, end-to-end), the race detector on the concurrent packages, and the size check
	$(GO) test -count=1 $$($(GO) list ./... | grep -v -e /pkg/sim/podsim -e /pkg/sim/simcli)
	$(GO) test -count=1 -timeout 20m -p 1 $(SIM_PKGS)
	$(MAKE) test-race
	$(MAKE) size

test-race: ## Run the tests of the concurrent packages under the race detector
	$(GO) test -race -count=1 $$($(GO) list ./pkg/... | grep -v -e /pkg/sim/podsim -e /pkg/sim/simcli)
	$(GO) test -race -count=1 -timeout 20m -p 1 $(SIM_PKGS)

test-loaded: ## Run make test beside a CPU load on every core (RUNS=3 for three runs; RACE_RUNS=5 adds go test -race ./...): the gate must pass on a busy machine
	@bash scripts/test-loaded.sh

size: build ## Check that the binary is static and at most 12 MiB
	@bash scripts/check-binary.sh $(BIN)

subjects: ## Refuse commit subjects over 72 characters on commits since issue 38 (CI runs it)
	@bash scripts/check-subjects.sh

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

faults: ## Run prestop's fault matrix (the real binary against misbehaving admins, configs, signals) and print its table
	@out=$$(mktemp); status=0; MESHDRAIN_STRICT_TIMING=1 $(GO) test -count=1 -run 'TestFaultMatrix$$' -v ./cmd/meshdrain > $$out 2>&1 || status=$$?; \
	grep -E '^\||^load average' $$out; if [ $$status -ne 0 ]; then grep -E -- '--- FAIL|faults_test' $$out; fi; rm -f $$out; exit $$status

fuzz: ## Fuzz the stats parser, the admin response reader and prestop's flag/variable parsing, FUZZTIME (30s) each
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
	echo "fuzz $$name in $$pkg for $(FUZZTIME)"; $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; done

demo: build ## Replay the user's rollout (docs/facts.md §5) for each preStop strategy, on this machine
	$(SIM_BIN) simulate

# The release image: FROM scratch, one per platform, from binaries cross-compiled here, so it
# builds offline (scripts/image/Dockerfile.release; the Dockerfile builds the same from source).
.PHONY: binaries image-push
IMAGE_PLATFORMS := linux/amd64 linux/arm64
RELEASE_DIR ?= bin/release
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# podman when installed (no daemon to reach), else docker when its daemon answers. podman
# builds with --layers=false: it would otherwise keep an image per instruction, left behind as
# <none> by every rebuild (docker's BuildKit keeps none).
IMAGE_ENGINE ?= $(shell command -v podman >/dev/null && echo podman || { docker info >/dev/null 2>&1 && echo docker; })
# Where image-push puts the multi-platform image; with podman any containers-transports(5)
# destination, e.g. oci-archive:FILE.
IMAGE_DEST ?= docker://$(IMAGE)

binaries: ## Cross-compile the image's static binaries (linux/amd64, linux/arm64) into bin/release
	@set -e; for p in $(IMAGE_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; out=$(RELEASE_DIR)/meshdrain-$$os-$$arch; \
	CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $$out ./cmd/meshdrain; \
	bash scripts/check-binary.sh $$out; done

image: ## Build the release image offline with podman or docker: IMAGE-amd64, IMAGE-arm64, and IMAGE for this machine
	@set -e; engine='$(IMAGE_ENGINE)'; \
	if [ -z "$$engine" ]; then \
	  if command -v docker >/dev/null; then echo "make image: docker's daemon does not answer (docker info) and podman is not installed; start docker, or install podman (Debian: apt-get install podman)" >&2; \
	  else echo "make image needs podman or docker, and neither is installed (Debian: apt-get install podman)" >&2; fi; exit 1; \
	fi; \
	command -v "$$engine" >/dev/null || { echo "make image: IMAGE_ENGINE=$$engine is not installed" >&2; exit 1; }; \
	$(MAKE) --no-print-directory binaries; \
	flags=; if [ "$$engine" = podman ]; then flags=--layers=false; fi; \
	for p in $(IMAGE_PLATFORMS); do \
	  echo "$$engine build $(IMAGE)-$${p#*/} ($$p)"; \
	  $$engine build $$flags --platform $$p -f scripts/image/Dockerfile.release \
	    --build-arg 'VERSION=$(VERSION)' --build-arg 'REVISION=$(REVISION)' -t $(IMAGE)-$${p#*/} $(RELEASE_DIR); \
	done; \
	host=linux/$$($(GO) env GOARCH); \
	case " $(IMAGE_PLATFORMS) " in *" $$host "*) $$engine tag $(IMAGE)-$${host#*/} $(IMAGE); echo "$(IMAGE) is $(IMAGE)-$${host#*/}";; \
	*) echo "$(IMAGE) not tagged: this machine ($$host) is none of $(IMAGE_PLATFORMS)";; esac

image-push: image ## Push IMAGE as one multi-platform image (IMAGE_DEST=oci-archive:FILE with podman to write a file)
	@set -e; engine='$(IMAGE_ENGINE)'; \
	if [ "$$engine" = podman ]; then \
	  list=localhost/meshdrain-image-push:$$$$; trap 'podman manifest rm $$list >/dev/null 2>&1 || true' EXIT; \
	  podman manifest create $$list >/dev/null; \
	  for p in $(IMAGE_PLATFORMS); do podman manifest add $$list containers-storage:$(IMAGE)-$${p#*/} >/dev/null; done; \
	  podman manifest push --all $$list '$(IMAGE_DEST)'; \
	else \
	  [ '$(IMAGE_DEST)' = 'docker://$(IMAGE)' ] || { echo "make image-push: IMAGE_DEST needs podman; docker pushes to IMAGE" >&2; exit 1; }; \
	  for p in $(IMAGE_PLATFORMS); do docker push $(IMAGE)-$${p#*/}; done; \
	  docker manifest rm $(IMAGE) >/dev/null 2>&1 || true; \
	  docker manifest create $(IMAGE) $(foreach p,$(IMAGE_PLATFORMS),$(IMAGE)-$(notdir $(p))); \
	  docker manifest push --purge $(IMAGE); \
	fi; \
	echo "pushed $(IMAGE) ($(IMAGE_PLATFORMS)) to $(IMAGE_DEST)"

bench: build ## The benchmark matrix: every traffic shape x preStop strategy, then poll costs (several minutes)
	$(GO) run ./scripts/bench --meshdrain-bin $(BIN) --sim-bin $(SIM_BIN) $(BENCH_FLAGS)

calibrate: ## Replay 10,000 seeded drains per shape, lag family and --risk through the rule: the risk figure's reliability table, docs/calibration.svg, the frontier against fixed sleeps (docs/frontier.svg) and the loop closed (a few minutes)
	$(GO) run ./scripts/calibrate --svg docs/calibration.svg --frontier-svg docs/frontier.svg $(CALIBRATE_FLAGS)

clean: ## Remove build output
	rm -rf bin
