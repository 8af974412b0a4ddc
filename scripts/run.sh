#!/usr/bin/env bash
# Sets up, builds and runs the main job on the bundled tiny model (the README's first command):
# transcribes a bundled WAV and prints its segments.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
scripts/setup.sh --no-python
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$jobs" --target vibevoice
model=tests/data/golden/model-hf
audio=tests/data/golden/cases/jfk/audio.wav
if build/cpu/service/vibevoice transcribe --help >/dev/null 2>&1; then
  exec build/cpu/service/vibevoice transcribe --model "$model" --tokenizer tests/data/tokenizer/tokenizer.json \
    --format verbose_json "$audio"
else
  exec build/cpu/service/vibevoice inspect --model "$model"
fi
