# CPU image of vibevoice. Build: docker build -t vibevoice .
# Run:   docker run --rm -v ~/models:/models vibevoice transcribe --model /models/VibeVoice-ASR-HF /models/a.wav
FROM debian:12 AS build
WORKDIR /src
COPY scripts/setup.sh scripts/requirements-test.txt scripts/
RUN scripts/setup.sh --no-python
COPY . .
RUN cmake --preset cpu -DVV_BUILD_TESTS=OFF -DVV_BUILD_BENCH=OFF && cmake --build --preset cpu -j --target vibevoice

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libspdlog1.10 libsimdjson14 libutf8proc2 libsoxr0 libavformat59 libavcodec59 libswresample4 \
      libavutil57 libasound2 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/cpu/service/vibevoice /usr/local/bin/vibevoice
ENTRYPOINT ["/usr/local/bin/vibevoice"]
