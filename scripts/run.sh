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
build/cpu/service/vibevoice transcribe --model "$model" --tokenizer tests/data/tokenizer/tokenizer.json \
  --format verbose_json "$audio"
echo "(The bundled model has random weights: its transcript is empty or noise, but every stage ran -" \
  "audio front end, both encoders, the Qwen2.5 decoder at tiny sizes. README.md, 'Using the real" \
  "model', says how to get microsoft/VibeVoice-ASR.)" >&2
