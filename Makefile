# Developer shortcuts. CI runs .ci/run, which runs `make test`.
GO ?= go

# The repository's modules (issue 13). The library at the root requires pgx and little else; the CLI, the two
# adapters and the dashboard's browser tests have dependencies of their own (cobra, Prometheus, OpenTelemetry,
# chromedp), so each is a module with its own go.mod. The committed go.work joins them for development.
MODULES := . cmd/pgflow pgflowprom pgflowotel internal/dashboard/browsertest
# Package patterns for every module: a plain ./... stops at a nested module's go.mod, also in workspace mode.
PACKAGES := ./... $(patsubst %,./%/...,$(filter-out .,$(MODULES)))

# golangci-lint, installed by .ci/setup (go install, pinned version) into GOBIN or the first GOPATH's bin.
GOLANGCI_LINT ?= $(shell d="$$($(GO) env GOBIN)"; [ -n "$$d" ] || d="$$($(GO) env GOPATH | cut -d: -f1)/bin"; echo "$$d/golangci-lint")

.PHONY: test setup lint modules demo

## test: the project's test command (the README's): set-up, formatting, vet, golangci-lint, the module checks,
## and every test of every module with the race detector.
## The set-up (.ci/setup) installs PostgreSQL and Chromium with apt-get when they are missing and it runs as root,
## and golangci-lint with go install; otherwise it stops at once, naming what to install.
test: setup
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory modules
	$(GO) test -race -count=1 -timeout 30m $(PACKAGES)

## setup: check (and install) what the tests need: PostgreSQL server binaries, Chromium, golangci-lint.
setup:
	@bash .ci/setup

## lint: gofmt must print nothing; go vet and golangci-lint (.golangci.yml) must pass, over every module.
lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needs to run on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PACKAGES)
	@if [ ! -x "$(GOLANGCI_LINT)" ]; then echo "make lint: golangci-lint is not installed at $(GOLANGCI_LINT): run make setup (or bash .ci/setup), which installs it with go install"; exit 1; fi
	$(GOLANGCI_LINT) run $(PACKAGES)

## modules: each module's go.mod and go.sum are tidy on their own (without go.work), and the library's module
## stays light: a library user's `go list -m all` holds pgx and its dependencies and robfig/cron only
## (scripts/check-light-module.sh).
modules:
	@for m in $(MODULES); do \
	  if ! (cd $$m && GOWORK=off $(GO) mod tidy -diff); then \
	    echo "make modules: $$m/go.mod or go.sum is not tidy; run: (cd $$m && GOWORK=off go mod tidy)"; exit 1; \
	  fi; \
	done
	@GO="$(GO)" bash scripts/check-light-module.sh

## demo: run the demo flow on a throwaway database.
demo:
	$(GO) run ./cmd/pgflow demo
