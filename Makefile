# onehost: the two commands a newcomer needs are `make run` and `make test`.
GO      ?= go
BIN     := bin
DATA    ?= data
SEED    := $(DATA)/seed.db
DB      ?= $(DATA)/feed.db
TOKENS  := $(DATA)/tokens.json
HOST    ?= 127.0.0.1
PORT    ?= 3000
JWT_SECRET ?= twelve-dollar-challenge
# Tests build the seed once per generator version into this cache and copy it per test.
export ONEHOST_SEED_CACHE ?= $(CURDIR)/.cache/seed

.PHONY: all build run run-worker seed reset-db test test-short seed-cache bench bench-feed fuzz vet clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# run: generate the seed if missing, make a serving copy if missing (never serve the seed
# itself), build, and run the cluster: one worker per CPU this process may use (the cgroup's
# limit), all on HOST:PORT, supervised (configs/cluster.yaml; INSTANCES overrides).
INSTANCES ?= max
run: build $(DB)
	SQLITE_PATH=$(DB) JWT_SECRET=$(JWT_SECRET) $(BIN)/supervisor run -config configs/cluster.yaml \
		-instances $(INSTANCES) -listen $(HOST):$(PORT)

# run-worker: one worker alone, binding HOST:PORT itself with SO_REUSEPORT.
run-worker: build $(DB)
	SQLITE_PATH=$(DB) JWT_SECRET=$(JWT_SECRET) HOST=$(HOST) PORT=$(PORT) $(BIN)/worker

seed: $(SEED) $(TOKENS)

$(SEED): | build
	@mkdir -p $(DATA)
	$(BIN)/worker seed -db $(SEED)

$(TOKENS): | build
	@mkdir -p $(DATA)
	JWT_SECRET=$(JWT_SECRET) $(BIN)/worker seed -db $(SEED) -tokens $(TOKENS)

$(DB): $(SEED)
	cp $(SEED) $(DB)
	rm -f $(DB)-wal $(DB)-shm

# reset-db: throw away the serving copy's writes and start again from the seed.
reset-db: $(SEED)
	rm -f $(DB) $(DB)-wal $(DB)-shm
	cp $(SEED) $(DB)

# test: the seed cache is filled by the hash test without -race (the race detector makes
# the generator ~10x slower), then the whole suite runs with -race.
test: seed-cache
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

seed-cache:
	$(GO) test -count=1 -run 'TestContentHash' ./internal/seed/

test-short:
	$(GO) test -short -count=1 ./...

vet:
	$(GO) vet ./...

# bench: Go micro-benchmarks (CPU and allocations per operation) of the hot paths.
bench: seed-cache
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./internal/...

# bench-feed: end-to-end CPU per request against the Node peer (see docs/performance.md).
bench-feed: build seed
	bench/feed.sh

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 60s ./internal/http1/
	$(GO) test -run '^$$' -fuzz '^FuzzRoute$$' -fuzztime 60s ./internal/feed/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCreateBody$$' -fuzztime 60s ./internal/feed/
	$(GO) test -run '^$$' -fuzz '^FuzzAppendJSONString$$' -fuzztime 30s ./internal/feed/
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime 60s ./internal/token/
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime 60s ./internal/cluster/

clean:
	rm -rf $(BIN) .cache
