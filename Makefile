GO ?= go
BIN := bin/durachk

.PHONY: build test run lint clean bench selftest

build:
	$(GO) build -o $(BIN) ./cmd/durachk

# The packages whose tests take longest (real clusters and brokers) first: go
# test starts packages in the order given, four at a time, so the long ones do
# not start last and hold the run up alone at its end (longest first, as
# measured on 2026-12-04 at -p 4: 142, 114, 104, 97, 95, 90, 73, 54, 43, 32 s;
# ./examples, the example gate workflow run three times: 54 s alone, 84 s at load 7;
# ./internal/driver, the worker protocol's workers, River, BullMQ and pg-boss
# one after another: 87 s at load 6, 137 s at load 10, 2026-12-07).
SLOW := ./internal/runner/extclusters ./internal/runner/clusters ./internal/runner/loadfactor ./adapters/sqs ./internal/cli ./internal/targets ./explore ./examples ./internal/driver ./adapters/nats ./internal/runner/selftest ./adapters/queuetest ./internal/runner ./adapters/rabbit

# Packages at a time: real-broker tests mostly wait on brokers and processes.
# .ci/run asks for two on a machine that is already busy (fewer of our own
# processes competing for the CPUs the others leave).
P ?= 4

# The whole suite on this machine's services, found or started as .ci/run
# does (tools/test.sh), with the skipped tests counted by reason at the end.
# -parallel stays go test's default: Ginkgo refuses the flag.
test:
	tools/test.sh $(P) $(SLOW) ./...

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
