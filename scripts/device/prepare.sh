#!/usr/bin/env bash
# Here (the dev machine), before a run on the GPU host: fills the ignored .device/ folder with what
# the host lacks and takes along (../shared/device/README.md):
#   .device/debs/     Debian 12 packages of the libraries the host has not got (unpacked there)
#   .device/wheels/   transformers 5.24.0 and friends for Python 3.12 (the goldens' reference)
#   .device/golden/   make_golden.py, bench_reference.py, decode_roofline.py, tokenizer.json, data/
#   .device/src.tar.gz, .device/src.rev   the committed tree at HEAD (so that a run measures a commit,
#                     not whatever is half-edited in the working tree), made again on every call
# Usage: scripts/device/prepare.sh [--src-only] [--base REV]
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=${VV_SHARED_DIR:-../shared}
mkdir -p .device
if [ "${1:-}" != --src-only ]; then
  if [ ! -d .device/debs ]; then
    mkdir -p .device/debs
    (cd .device/debs && apt-get download libsimdjson-dev libsimdjson14 libtomlplusplus-dev libtomlplusplus3 \
      libsoxr-dev libsoxr0 libutf8proc-dev libutf8proc2 prometheus-cpp-dev libprometheus-cpp-core1.0)
  fi
  if [ ! -d .device/wheels ]; then
    mkdir -p .device/wheels
    .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
      --platform any -d .device/wheels transformers==5.24.0 soundfile soxr cffi pycparser
  fi
  mkdir -p .device/golden
  cp "$shared"/golden/{make_golden.py,bench_reference.py,tokenizer.json} .device/golden/
  cp -r "$shared"/golden/data .device/golden/
  cp "$shared"/device/decode_roofline.py .device/golden/
fi
# --base REV (after the other arguments): REV's tree too, as .device/base.tar.gz (host_measure.sh b1ab builds it beside)
for ((i = 1; i <= $#; ++i)); do
  if [ "${!i}" = --base ]; then
    j=$((i + 1))
    rev=$(git rev-parse --short "${!j}")
    git archive "$rev" -- . ':!tests/data' | gzip -1 > .device/base.tar.gz
    echo "$rev" > .device/base.rev
    echo "base snapshot: $rev"
  fi
done
git archive HEAD -- . ':!tests/data' | gzip -1 > .device/src.tar.gz
git rev-parse --short HEAD > .device/src.rev
du -sh .device | cut -f1 | sed 's/^/.device: /'
echo "source snapshot: $(cat .device/src.rev)"
