# raftlock: build in a Rust image, run in a slim Debian.
#   docker build -t raftlock .
#   docker run -p 6379:6379 -v raftlock-data:/data raftlock
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
