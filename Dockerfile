# speedmatrix in a container: a static binary on its own, or beside an inference engine.
#
#   docker build --target speedmatrix -t speedmatrix .              # the tool alone (FROM scratch)
#   docker build --target with-vllm -t speedmatrix-vllm .           # beside vLLM's image
#
# The binary is linked statically against musl (rustls, no OpenSSL), so the first image holds
# nothing but it and its CA-less TLS needs no system files. Not built in this repository's CI
# (no container runtime there): see docs/study.md for what was checked where.

# Build: the pinned toolchain, a musl static binary, completions and man pages.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools git && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p speedmatrix --target x86_64-unknown-linux-musl \
 && mkdir -p /out/bin \
 && cp target/x86_64-unknown-linux-musl/release/speedmatrix /out/bin/ \
 && /out/bin/speedmatrix assets --out /out

# The tool alone: `docker run --rm --network host speedmatrix run --url http://127.0.0.1:8000 ...`
FROM scratch AS speedmatrix
COPY --from=build /out/bin/speedmatrix /speedmatrix
ENTRYPOINT ["/speedmatrix"]
CMD ["--help"]

# Beside an engine: vLLM's own image with speedmatrix on its PATH, for a pod or a study that
# starts `vllm serve` and measures it from the same container.
FROM vllm/vllm-openai:v0.32.0 AS with-vllm
COPY --from=build /out/bin/speedmatrix /usr/local/bin/speedmatrix
COPY --from=build /out/completions/speedmatrix.bash /etc/bash_completion.d/speedmatrix
COPY --from=build /out/man/ /usr/local/share/man/man1/
ENTRYPOINT []
