#!/usr/bin/env bash
# The AMDGPU linker FlyDSL needs to build an hsaco without ROCm: an ld.lld that knows amdgcn.
# (The ocml/ockl bitcode comes with Triton's AMD backend, so pip already installed it.)
#
# Unpacks Debian's lld-19 + libllvm19 into inductor-ext's tool cache (no root install:
# `apt-get download` + `dpkg -x`), or, where apt-get is missing, installs the `ziglang`
# wheel (its `zig ld.lld`). Idempotent: exits at once when inductor_ext.runtime.toolchain
# already finds a working ld.lld. Needs `pip install -e .` first (it asks the package where
# the tool cache is).
set -euo pipefail
# What lands in the tool folder is the user's alone: a file others can write there makes ext move
# the whole folder aside as untrusted (runtime/private_files.py), whatever the caller's umask.
umask 077

PY=${PYTHON:-python}
found() { "$PY" -c 'from inductor_ext.runtime import toolchain as t; p = t.ld_lld(); print(p or ""); raise SystemExit(0 if p and t.lld_works(p) else 1)'; }

if path=$(found); then
  echo "ld.lld: $path (already there)"
  exit 0
fi

start=$SECONDS
cache=$("$PY" -c 'from inductor_ext.runtime.toolchain import tool_cache_dir; print(tool_cache_dir())')
dest="$cache/lld"

if command -v apt-get >/dev/null && command -v dpkg >/dev/null; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # Libraries libLLVM.so.19 links that a slim image may lack (Debian bookworm package names).
  declare -A lib_pkg=(
    [libffi.so.8]=libffi8 [libedit.so.2]=libedit2 [libz3.so.4]=libz3-4 [libxml2.so.2]=libxml2
    [libicuuc.so.72]=libicu72 [libicudata.so.72]=libicu72 [libbsd.so.0]=libbsd0 [libmd.so.0]=libmd0
    [libtinfo.so.6]=libtinfo6 [liblzma.so.5]=liblzma5 [libzstd.so.1]=libzstd1 [libz.so.1]=zlib1g
  )
  (cd "$work" && apt-get download lld-19 libllvm19 >/dev/null 2>&1) || {
    (apt-get update >/dev/null 2>&1 || true)
    (cd "$work" && apt-get download lld-19 libllvm19 >/dev/null)
  }
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest.tmp"; done
  llvm_dir=$(ls -d "$dest.tmp"/usr/lib/llvm-* | head -1)
  # lld's RUNPATH is $ORIGIN/../lib; the libllvm package puts the library in the multiarch dir.
  mkdir -p "$llvm_dir/lib"
  for so in "$dest.tmp"/usr/lib/x86_64-linux-gnu/libLLVM*.so.*; do
    ln -sf "../../x86_64-linux-gnu/$(basename "$so")" "$llvm_dir/lib/$(basename "$so")"
  done
  missing=$(ldd "$llvm_dir/bin/lld" | awk '/not found/ {print $1}' | sort -u)
  if [ -n "$missing" ]; then
    pkgs=$(for so in $missing; do echo "${lib_pkg[$so]:-}"; done | sort -u | tr '\n' ' ')
    (cd "$work" && rm -f ./*.deb && apt-get download $pkgs >/dev/null)
    extra="$work/extra" && mkdir -p "$extra"
    for deb in "$work"/*.deb; do dpkg -x "$deb" "$extra"; done
    find "$extra" -name '*.so*' \( -type f -o -type l \) -exec cp -a {} "$llvm_dir/lib/" \;
  fi
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
else
  "$PY" -m pip install -q ziglang
fi

if path=$(found); then
  echo "ld.lld: $path (installed in $((SECONDS - start)) s)"
else
  echo "could not install an AMDGPU ld.lld: install Debian's lld-19 or 'pip install ziglang'" >&2
  exit 1
fi
