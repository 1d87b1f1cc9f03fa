#!/usr/bin/env bash
# style.clang_format: every C++ and CUDA file git tracks is laid out as .clang-format says.
# clang-format's output changes between major versions; the layout is pinned to clang-format 14
# (Debian 12's, installed by .ci/deps.sh), and another major version skips (exit 77).
# Usage: check_format.sh REPO_ROOT
set -uo pipefail
root=${1:?usage: check_format.sh REPO_ROOT}
cd "$root" || exit 1

tool=""
for t in clang-format-14 clang-format; do
  if command -v "$t" >/dev/null; then tool=$t; break; fi
done
if [ -z "$tool" ]; then
  echo "style.clang_format: clang-format not found (make deps installs it)" >&2
  exit 1
fi
major=$("$tool" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "$major" != "14" ]; then
  echo "style.clang_format: $tool is version $major; the layout is pinned to 14: skipped"
  exit 77
fi

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
else
  mapfile -t files < <(find apps bench core lessons tests viewer \
                         \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \
                            -o -name '*.h' \) | sort)
fi
# One run over every file; clang-format names each file and line that differs.
report=$("$tool" --style=file --dry-run -Werror "${files[@]}" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  mapfile -t bad < <(printf '%s\n' "$report" | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error:.*/\1/p' |
                     sort -u)
  echo "style.clang_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format:" >&2
  printf '%s\n' "$report" | head -40 >&2
  echo "fix: $tool -i --style=file ${bad[*]}" >&2
  exit 1
fi
echo "style.clang_format: ${#files[@]} files as .clang-format says ($tool $major)"
