#!/usr/bin/env bash
# Prepares, on a machine without a GPU, everything issue 16's first stage runs on a lent one, so
# that one device call does the whole stage (bench/gpu/device_check.sh; docs/gpu.md, "On a lent
# GPU"). The device image has CUDA, cuBLAS and PyTorch (with NCCL) but neither OpenBLAS nor Open
# MPI, and no package registry to fetch them from:
#   1. builds `shardlab` and `shardlab_cuda_tests` of the `cuda` preset (sm_80 and sm_90) here;
#   2. copies them, stripped, to build-cuda/gpu-bundle/bin;
#   3. downloads the Debian packages of the libraries they link that the device lacks (OpenBLAS,
#      gfortran's runtime, Open MPI and its hwloc and libevent) to build-cuda/gpu-bundle/debs,
#      which device_check.sh unpacks aside, not into /;
#   4. checks that every library the two binaries need is in those packages, in the CUDA
#      toolkit's set (cudart, cuBLAS, cuBLASLt, NCCL: found on the device) or in the base system.
# Then: the device tool's run with carry ["build-cuda/gpu-bundle"] and the command
# `bash bench/gpu/device_check.sh`. The bundle is about 15 MB of the call's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build-cuda/gpu-bundle
DEBS="libopenblas0-pthread libgfortran5 libquadmath0 libopenmpi3 libhwloc15 libevent-core-2.1-7
      libevent-pthreads-2.1-7"
# What the device provides: the C and C++ runtimes and the base system, and CUDA's own libraries.
BASE='^(libc|libm|libpthread|librt|libdl|libstdc\+\+|libgcc_s|libz|libudev)\.so'
CUDA_LIBS='^(libcudart|libcublas|libcublasLt|libnccl)\.so'

echo "== build (cuda preset)"
cmake --preset cuda >/dev/null
cmake --build build-cuda -j"${JOBS:-2}" --target shardlab shardlab_cuda_tests

rm -rf "$B"
mkdir -p "$B/bin" "$B/debs"
for b in shardlab shardlab_cuda_tests; do strip -o "$B/bin/$b" "build-cuda/bin/$b"; done

echo "== Debian packages"
(cd "$B/debs" && apt-get download $DEBS)

echo "== closure"
listing=$(for d in "$B"/debs/*.deb; do dpkg-deb -c "$d"; done)
missing=0
for b in "$B"/bin/*; do
  while read -r name _ path _; do
    [[ "$name" == linux-vdso* || "$name" == */ld-linux* ]] && continue
    if [[ "$name" =~ $BASE ]]; then continue; fi
    if [[ "$name" =~ $CUDA_LIBS ]]; then continue; fi
    if ! grep -q "/$name\$\|/$name -> " <<<"$listing"; then
      echo "bundle.sh: $(basename "$b") needs $name ($path), which no bundled package holds" >&2
      missing=1
    fi
  done < <(ldd "$b")
done
[ "$missing" = 0 ] || exit 1
du -sh "$B"
echo "bundle.sh: $B is ready: run bench/gpu/device_check.sh on the device with carry [\"$B\"]"
