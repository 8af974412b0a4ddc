#!/usr/bin/env bash
# Installs everything vibevoice-server needs to build and test on Debian 12.
# Idempotent: re-running it only installs what is missing.
# Usage: scripts/setup.sh [--no-python]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
with_python=1
[ "${1:-}" = "--no-python" ] && with_python=0

sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi

pkgs=(
  build-essential cmake ninja-build pkg-config git clang libclang-rt-14-dev clang-format
  libboost1.81-dev libspdlog-dev libfmt-dev libsimdjson-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libtomlplusplus-dev
  libsoxr-dev libavformat-dev libavcodec-dev libswresample-dev libavutil-dev
  libutf8proc-dev libasound2-dev
  ffmpeg espeak-ng sox curl python3 python3-venv
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages present"
fi

if [ "$with_python" = 1 ]; then
  venv="$here/.venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  if ! "$venv/bin/python" -c 'import openai, pytest, numpy, safetensors, schemathesis, prometheus_client, aiohttp, litellm, websockets' 2>/dev/null; then
    echo "setup: installing Python test tools into .venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/scripts/requirements-test.txt"
  else
    echo "setup: Python test tools present"
  fi
fi
