# There (the GPU host), sourced at the start of a command run from the repository root:
#   . scripts/device/host_env.sh
# Unpacks .device/debs into /tmp/deps (their .pc files re-prefixed), puts ninja and the reference wheels on the path, and sets
# VV_SRC to the tree to build: /tmp/vvsrc, the committed snapshot (.device/src.tar.gz, with this
# tree's tests/data beside it) when there is one, else this tree.
if [ ! -d /tmp/deps/usr ]; then
  mkdir -p /tmp/deps && for f in .device/debs/*.deb; do dpkg -x "$f" /tmp/deps; done
fi
# Debian's .pc files say prefix=/usr; point them at the unpacked tree (pkg-config would otherwise
# hand out -I/usr/include, where the host has none of these headers)
sed -i 's|^prefix=/usr$|prefix=/tmp/deps/usr|' /tmp/deps/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc \
  /tmp/deps/usr/share/pkgconfig/*.pc 2>/dev/null || true
export CMAKE_PREFIX_PATH=/tmp/deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu/pkgconfig:/tmp/deps/usr/share/pkgconfig
py=$(command -v python3)
# the venv's bin (its ninja); not the resolved interpreter's folder, whose python3 has no torch
export PATH="$(dirname "$py"):$PATH"
if [ -d .device/wheels ] && [ ! -d /tmp/refpy ]; then
  python3 -m pip install -q --no-deps --target /tmp/refpy .device/wheels/*.whl >/dev/null 2>&1 || true
fi
export VV_REF_PYTHONPATH=/tmp/refpy
if [ -f .device/src.tar.gz ]; then
  # a warm machine keeps /tmp/vvsrc from an earlier call: take the snapshot again when it changed
  if [ ! -d /tmp/vvsrc ] || ! cmp -s .device/src.rev /tmp/vvsrc.rev; then
    rm -rf /tmp/vvsrc && mkdir -p /tmp/vvsrc && tar -xzf .device/src.tar.gz -C /tmp/vvsrc &&
      cp -r tests/data /tmp/vvsrc/tests/ && cp .device/src.rev /tmp/vvsrc.rev
  fi
  export VV_SRC=/tmp/vvsrc
else
  export VV_SRC=$PWD
fi
export VV_DEV=$PWD/.device
