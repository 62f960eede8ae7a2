GO ?= go
BIN := bin/durachk

.PHONY: build test run lint clean bench selftest

build:
	$(GO) build -o $(BIN) ./cmd/durachk

# The packages whose tests take longest (real clusters and brokers) first: go
# test starts packages in the order given, four at a time, so the long ones do
# not start last and hold the run up alone at its end.
SLOW := ./internal/runner/clusters ./internal/runner/selftest ./internal/runner ./internal/targets ./adapters/sqs ./adapters/nats ./adapters/queuetest ./explore ./adapters/rabbit ./internal/cli

# Packages at a time: real-broker tests mostly wait on brokers and processes.
# .ci/run asks for two on a machine that is already busy (fewer of our own
# processes competing for the CPUs the others leave).
P ?= 4

test: ## -parallel stays go test's default: Ginkgo refuses the flag
	$(GO) test -count=1 -p $(P) $(SLOW) ./...

run: build
	./$(BIN) run

selftest: build
	./$(BIN) selftest

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=1x ./checker/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin out
