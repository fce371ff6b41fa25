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

.PHONY: help build test test-race lint demo clean image faults fuzz bench

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-10s %s\n", $$1, $$2}'

build: ## Build the pod binary (bin/meshdrain: static, stripped) and the test world (bin/meshdrain-sim)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/meshdrain
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(SIM_BIN) ./cmd/meshdrain-sim

test: lint ## Run every test (unit, integration, end-to-end), the race detector on the concurrent packages, and the size check
	$(GO) test -count=1 ./...
	$(MAKE) test-race
	$(MAKE) size

test-race: ## Run the tests of the concurrent packages under the race detector
	$(GO) test -race -count=1 ./pkg/...

size: build ## Check that the binary is static and at most 12 MiB
	@bash scripts/check-binary.sh $(BIN)

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

faults: ## Run prestop's fault matrix (the real binary against misbehaving admins, configs, signals) and print its table
	@out=$$(mktemp); status=0; $(GO) test -count=1 -run 'TestFaultMatrix$$' -v ./cmd/meshdrain > $$out 2>&1 || status=$$?; \
	grep -E '^\|' $$out; if [ $$status -ne 0 ]; then grep -E -- '--- FAIL|faults_test' $$out; fi; rm -f $$out; exit $$status

fuzz: ## Fuzz the stats parser, the admin response reader and prestop's flag/variable parsing, FUZZTIME (30s) each
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
	echo "fuzz $$name in $$pkg for $(FUZZTIME)"; $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; done

demo: build ## Replay the user's rollout (docs/facts.md §5) for each preStop strategy, on this machine
	$(SIM_BIN) simulate

image: ## Print the docker build command of the release image (IMAGE=... to push elsewhere)
	@echo docker build -t $(IMAGE) --build-arg VERSION=$(RELEASE) .

bench: build ## The benchmark matrix: every traffic shape x preStop strategy, then poll costs (several minutes)
	$(GO) run ./scripts/bench --meshdrain-bin $(BIN) --sim-bin $(SIM_BIN) $(BENCH_FLAGS)

clean: ## Remove build output
	rm -rf bin
