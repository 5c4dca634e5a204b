# raftlock: build in a Rust image, run in a slim Debian.
#   docker build -t raftlock .
#   docker run -p 6379:6379 -v raftlock-data:/data -e RAFTLOCK_REQUIREPASS=<a long random password> raftlock
# Without a password the server is in protected mode: it serves only clients
# on its own loopback interface, so clients outside the container are turned
# away (DENIED). Set RAFTLOCK_REQUIREPASS (clients then AUTH, e.g.
# `redis-cli -a ...`), or, on a network you trust, RAFTLOCK_PROTECTED_MODE=no.
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libclang-dev clang && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY tests ./tests
RUN cargo build --release --bin raftlock

FROM debian:bookworm-slim
RUN useradd --system --home /data raftlock && mkdir -p /data && chown raftlock /data
COPY --from=build /src/target/release/raftlock /usr/local/bin/raftlock
USER raftlock
VOLUME /data
EXPOSE 6379 16379 9379
ENV RAFTLOCK_BIND=0.0.0.0 RAFTLOCK_DATA_DIR=/data RAFTLOCK_METRICS_ADDR=0.0.0.0:9379
ENTRYPOINT ["/usr/local/bin/raftlock"]
