# syntax=docker/dockerfile:1
#
# loopguard container image: a build stage with the Rust toolchain and what librdkafka's
# vendored CMake build needs, and a small Debian runtime that runs as an unprivileged user.
#
#   docker build -t loopguard:dev .
#   docker run --rm loopguard:dev rules
#
# The runtime stage carries ca-certificates for TLS to the brokers. If the rdkafka crate
# is built with the dynamically linked `ssl` feature instead of a vendored OpenSSL, add
# libssl3 to the runtime stage.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake g++ make perl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The cargo registry and target directory are BuildKit caches: a rebuild after a source
# change reuses the compiled dependencies (librdkafka included).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin loopguard \
 && install -D -m 0755 target/release/loopguard /out/loopguard \
 && strip --strip-debug /out/loopguard

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/loopguard /usr/local/bin/loopguard
# 65532: the conventional "nonroot" uid/gid; no home, no shell login needed.
USER 65532:65532
# Admin HTTP: /livez, /readyz, /metrics, on every interface of the container (the
# built-in default is loopback).
ENV LOOPGUARD__ADMIN__LISTEN=0.0.0.0:9464
EXPOSE 9464
ENTRYPOINT ["loopguard"]
CMD ["serve"]
