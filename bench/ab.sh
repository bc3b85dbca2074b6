#!/usr/bin/env bash
# Before/after in one run of the machine: alternates the barrier and throughput benchmarks between
# a worktree of BEFORE (a git revision) and the working tree, ROUNDS times, so that each pair shares
# the machine's state. Usage: bench/ab.sh BEFORE [ROUNDS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bench/ab.sh BEFORE [ROUNDS] [OUT_DIR]}
rounds=${2:-2}
out=${3:-$(mktemp -d)}
py=$PWD/.venv/bin/python
tree=$(mktemp -d)/before
git worktree add --detach "$tree" "$before" >/dev/null
trap 'git worktree remove --force "$tree"' EXIT
for round in $(seq "$rounds"); do
  for side in before after; do
    dir=$PWD; [ "$side" = before ] && dir=$tree
    for bench in bench_barrier bench_throughput; do
      echo "== round $round $side $bench $(date +%T)"
      (cd "$dir" && PYTHONPATH="$dir/src:$dir" "$py" -m "bench.$bench") >"$out/$bench-$side-$round.md" 2>>"$out/stderr.txt"
    done
  done
done
echo "results in $out"
