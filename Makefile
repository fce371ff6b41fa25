# meshdrain's build. `make help` lists the targets.
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/meshdrain/meshdrain/pkg/cli.Version=$(VERSION)
BIN := bin/meshdrain
GO ?= go

.PHONY: help build test test-race lint demo bench clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-10s %s\n", $$1, $$2}'

build: ## Build the static, stripped binary into bin/meshdrain
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/meshdrain

test: lint ## Run every test (unit, integration, end-to-end), the race detector on the concurrent packages, and the size check
	$(GO) test -count=1 ./...
	$(MAKE) test-race
	$(MAKE) size

test-race: ## Run the tests of the concurrent packages under the race detector
	$(GO) test -race -count=1 ./pkg/...

size: build ## Check that the binary is static and at most 8 MiB
	@bash scripts/check-binary.sh $(BIN)

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

demo: build ## Replay the user's rollout (domain.md §5) for each preStop strategy, on this machine
	$(BIN) simulate

bench: build ## The benchmark matrix: every traffic shape x preStop strategy, then poll costs (several minutes)
	$(GO) run ./scripts/bench --meshdrain-bin $(BIN) $(BENCH_FLAGS)

clean: ## Remove build output
	rm -rf bin
