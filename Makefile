# agent-control-plane — see README.md.
GO      ?= go
BIN     := bin/agent-control-plane
INIT    := bin/agent-control-plane-init
TOOL    := bin/stub-exec
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
PKGS    := ./...

.PHONY: all build run test vet fmt-check clean chaos fuzz bench install docker-stub man

all: build

# Static (no cgo): the daemon maps no libc (1.5-3 MiB less resident in
# the bench), its bundled stub is the same file, and that file runs as is
# in an image FROM scratch. Tests still build with cgo, for -race.
build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/agent-control-plane
	CGO_ENABLED=0 $(GO) build -o $(INIT) ./cmd/agent-control-plane-init

# The conformance suite's test tool: never part of the product.
$(TOOL): build
	$(GO) build -o $(TOOL) ./cmd/stub-exec

# The man pages, one per command (agent-control-plane man DIR); read one
# with man -l build/man/agent-control-plane-logs.1.
man: build
	$(BIN) man build/man

# Install as a systemd user service and start it (agent-control-plane
# install --now: the binary into ~/.local/bin, the units into
# ~/.config/systemd/user). INSTALLFLAGS="--prefix DIR" and the like pass on.
install: build
	$(BIN) install --now $(INSTALLFLAGS)

# The stub agent-server as an image (contrib/docker/Dockerfile.stub):
# the static binary, FROM scratch, so nothing is pulled. STUB_IMAGE names
# it.
STUB_IMAGE ?= agent-control-plane-stub:latest
docker-stub: build
	rm -rf bin/docker-stub && mkdir -p bin/docker-stub
	cp $(BIN) bin/docker-stub/agent-control-plane
	docker build -q -f contrib/docker/Dockerfile.stub -t $(STUB_IMAGE) bin/docker-stub

# The daemon in the foreground with the bundled stub agent as the child.
run: build
	$(BIN) serve

# Every test, under the race detector, against the binary just built
# (native sandboxes isolated where the machine allows); then the
# end-to-end tests again with cgroups and isolation off (process groups
# on the host only), as on a machine without them.
TESTBINS = ACP_TEST_BINARY=$(abspath $(BIN)) ACP_TEST_TOOL=$(abspath $(TOOL))
# What the second run skips: tests whose outcome no native mode changes
# (the docker runtime's, the documents' and the source tree's checks).
MODELESS = Docker|OpenAPI|Kin|GeneratedClient|Sizes|Rooms|Diagram|MatchTheDocument|CheckerCanFail|READMEGoBlocks|ManPages|READMECommandsMatchHelp|DashboardFitsALaptop

test: build $(TOOL) vet fmt-check
	$(TESTBINS) $(GO) test -race -count=1 -timeout 12m $(PKGS)
	AGENT_CONTROL_PLANE_CGROUPS=off AGENT_CONTROL_PLANE_ISOLATION=off $(TESTBINS) $(GO) test -race -count=1 -timeout 12m -skip '$(MODELESS)' ./tests

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin

# The reliability suite at full strength: 50 kill-and-restart rounds (make
# test runs 6), then every fuzz target for a while.
chaos: build
	ACP_CHAOS_ROUNDS=50 ACP_TEST_BINARY=$(abspath $(BIN)) $(GO) test -race -count=1 -run 'Chaos' -v ./tests
	$(MAKE) fuzz FUZZTIME=300000x

FUZZ_TARGETS := api:FuzzDecodeCreate api:FuzzLabelFilter api:FuzzParseLastEventID supervisor/redact:FuzzRedact supervisor:FuzzValidateCreate supervisor/redact:FuzzRedactMatchesReference supervisor/fileops:FuzzReplaceStream supervisor/fileops:FuzzUntar
# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can
# report a spurious "context deadline exceeded" when its deadline races a
# worker (golang/go#75804, fixed in Go 1.27); a count has no deadline.
FUZZTIME ?= 20000x

# Each fuzz target for FUZZTIME executions (CI runs the short default).
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./$$pkg || exit 1; \
	done

# The measurements of BENCHMARKS.md: two fresh daemons (cgroups on, off)
# with the stub agent, against floors in the same run (about 5 minutes on
# 2 cores; acp-bench -h for flags), then the micro-benchmarks.
bench: build
	$(GO) build -o bin/acp-bench ./cmd/acp-bench
	bin/acp-bench --bin $(BIN) $(BENCHFLAGS)
	$(GO) test -run '^$$' -bench . -benchtime 500ms ./supervisor/... ./api/
