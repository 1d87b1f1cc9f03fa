# Sourced by bench/gpu/device_check.sh and bench/gpu/gpu_speed.sh on a lent GPU machine, with $B
# the carried bundle (bench/gpu/bundle.sh): unpacks the bundle's Debian packages aside (into
# $LIBS, not /) and puts them, with CUDA's cudart, cuBLAS and NCCL from the toolkit or from
# PyTorch's pip packages, on LD_LIBRARY_PATH.
LIBS=${LIBS:-/tmp/shardlab-libs}
rm -rf "$LIBS" && mkdir -p "$LIBS"
for d in "$B"/debs/*.deb; do dpkg -x "$d" "$LIBS"; done
dir_of() {  # the first directory under the given roots holding library $1
  local root f
  for root in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda "${@:2}"; do
    [ -d "$root" ] || continue
    f=$(find -L "$root" -name "$1" -print -quit 2>/dev/null)
    [ -n "$f" ] && { dirname "$f"; return; }
  done
}
PYSITE=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
LP="$LIBS/usr/lib/x86_64-linux-gnu/openblas-pthread:$LIBS/usr/lib/x86_64-linux-gnu"
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  d=$(dir_of "$l" $PYSITE /usr/lib /opt)
  [ -n "$d" ] && LP="$LP:$d"
done
export LD_LIBRARY_PATH="$LP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
