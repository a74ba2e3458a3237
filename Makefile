# Stable entry points: run, test, components, release (and bench).
# Each installs what it needs, so they work on a fresh machine with only rustup.

CARGO       ?= cargo
WASM_TARGET := wasm32-wasip2
SAMPLES     := writer weather scientists
COMPONENTS  := target/components
PORT        ?= 7071

.PHONY: run test components release bench toolchain lint

## Build everything and serve the sample agents on 127.0.0.1:$(PORT).
run: components release
	./target/release/agenthost serve --components $(COMPONENTS) --store sqlite://agenthost.db --port $(PORT)

## The whole suite: formatting, lints (host and guests) and every test.
test: components lint
	$(CARGO) test --workspace --exclude writer --exclude weather --exclude scientists

## One component per sample: target/components/NAME.wasm.
components: toolchain
	$(CARGO) build --target $(WASM_TARGET) --release $(addprefix -p ,$(SAMPLES))
	@mkdir -p $(COMPONENTS)
	@for s in $(SAMPLES); do cp target/$(WASM_TARGET)/release/$$s.wasm $(COMPONENTS)/$$s.wasm; done
	@ls -l $(COMPONENTS)

## The host binary: target/release/agenthost.
release:
	$(CARGO) build --release -p agenthost

## Throughput/latency and component load benchmarks; report in target/bench/report.md.
bench: components
	$(CARGO) bench -p agenthost --bench http_and_load

lint: toolchain
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --exclude writer --exclude weather --exclude scientists --all-targets -- -D warnings
	$(CARGO) clippy --target $(WASM_TARGET) $(addprefix -p ,$(SAMPLES)) -- -D warnings

# rustup does not add the targets of rust-toolchain.toml to a toolchain that is
# already installed, and a fresh machine has only the native target.
toolchain:
	@rustup target add $(WASM_TARGET)
	@rustup component add rustfmt clippy 2>/dev/null || true
