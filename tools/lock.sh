#!/usr/bin/env bash
# Regenerate the hash-pinned lock files from locks/*.in.
# Usage: tools/lock.sh   (needs pip-tools: pip install pip-tools)
# ref.lock is resolved first; cand.lock is resolved under ref.lock's pins so that both
# runtimes share numpy and every other common dependency, and only onnxruntime differs.
# verify.lock (the reviewer's environment) is resolved under tools.lock's pins, so verify
# computes with the same numpy, scipy and scikit-learn in either environment.
set -euo pipefail
cd "$(dirname "$0")/../locks"
compile() { python -m piptools compile --quiet --generate-hashes --allow-unsafe \
  --strip-extras --no-header --resolver=backtracking "$@"; }
compile -o ref.lock ref.in
# cand may not need every ref package (sympy): constrain, do not require.
common=$(mktemp); trap 'rm -f "$common"' EXIT
grep -E '^[A-Za-z0-9_.-]+==' ref.lock | sed 's/ .*//' | grep -v '^onnxruntime==' >"$common"
compile -c "$common" -o cand.lock cand.in
compile -o tools.lock tools.in
tools=$(mktemp); trap 'rm -f "$common" "$tools"' EXIT
grep -E '^[A-Za-z0-9_.-]+==' tools.lock | sed 's/ .*//' >"$tools"
compile -c "$tools" -o verify.lock verify.in
# torch_scatter's metadata needs torch importable: resolve without build isolation, from an
# environment that has torch (the tools environment).
compile --no-build-isolation -o physicsnemo.lock physicsnemo.in
echo "locks regenerated: $(ls *.lock | tr '\n' ' ')"
