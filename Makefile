# make build puts evalsi, evalsid and evalsi-guest (the microVM rungs'
# guest init, static) side by side in bin/, where evalsid finds the guest.
# make test runs the README's test command.
GO ?= go
BIN ?= bin

.PHONY: build test
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/evalsi ./cmd/evalsid ./cmd/evalsi-guest

test:
	CGO_ENABLED=0 $(GO) test ./...
