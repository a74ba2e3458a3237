# syntax=docker/dockerfile:1
# agenthost in a container: the host and the sample components, built from
# this repository by its stable make targets, on a small runtime image that
# runs as a user of its own. The components directory and the store are
# volumes; probes: GET /api/health/live and /api/health/ready on 7071.
# docs/deploy.md walks through it (and the Kubernetes manifests beside it).
#
# `docker build .` compiles everything in the Rust image. Where that image
# cannot be pulled, `--build-arg BUILDER=prebuilt` takes the host and the
# components from target/image/prebuilt/ instead (`make image-test` puts
# what `make release components` built there), and `--build-arg BASE=...`
# names another Debian bookworm root for the runtime image.
ARG BUILDER=source
ARG RUST_IMAGE=rust:1.95-bookworm
ARG BASE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build-source
WORKDIR /src
COPY . .
RUN make release components COMPONENTS=/out/components \
    && cp target/release/agenthost /out/agenthost

FROM ${BASE} AS build-prebuilt
COPY target/image/prebuilt/agenthost /out/agenthost
COPY target/image/prebuilt/components /out/components

FROM build-${BUILDER} AS build
# `agenthost compile` puts each component's compiled code beside it
# (/out/components/.compiled/): a new container, its cache empty, loads
# them without compiling (`--load-precompiled` below: this image's own
# build wrote them). It is checked at load against the engine and the CPU;
# where it does not fit (another CPU kind), the host compiles instead.
RUN /out/agenthost compile /out/components

FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin agenthost \
    && mkdir -p /components /var/lib/agenthost \
    && chown 10001:10001 /var/lib/agenthost
COPY --from=build /out/agenthost /usr/local/bin/agenthost
COPY --from=build /out/components /components
USER 10001:10001
# The SQLite store and the compiled-component cache live here (one
# replica); give a PostgreSQL URL in AGENTHOST_STORE for more than one.
# The cache is named on the command line (this user has no home folder), and
# used only while nobody but this user or root may write the folder: its
# code is native code (docs/components.md, "Where compiled code comes from").
ENV AGENTHOST_STORE=sqlite:///var/lib/agenthost/agenthost.db
VOLUME ["/components", "/var/lib/agenthost"]
EXPOSE 7071
# SIGTERM drains: runs in flight finish (or are handed back) within
# --shutdown-grace, then the process exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/agenthost"]
CMD ["serve", "--host", "0.0.0.0", "--port", "7071", "--components", "/components", "--cache-dir", "/var/lib/agenthost/cache", "--load-precompiled"]
