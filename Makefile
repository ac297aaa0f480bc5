# make build puts evalsi, evalsid and evalsi-guest (the microVM rungs'
# guest init, static) side by side in bin/, where evalsid finds the guest.
# make test runs the README's test command. make (no target) builds; make help lists the targets.
GO ?= go
BIN ?= bin

.PHONY: help build test python
build: ## build evalsi, evalsid and evalsi-guest into bin/
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/evalsi ./cmd/evalsid ./cmd/evalsi-guest

test: ## run every test (CGO_ENABLED=0 go test ./...)
	CGO_ENABLED=0 $(GO) test ./...

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

python: ## the Python workspace of the quick start (cd python && uv sync --all-packages)
	cd python && uv sync --all-packages
