#!/usr/bin/env bash
# The kuhn-text recipe end to end: narrated uniform-random demonstrations -> SFT warm
# start (the model learns to write <think>...</think> [Action], not a strategy) -> text
# self-play with the kuhn-text preset -> sampled evaluation with a large K.
#
#   bash examples/kuhn_text.sh [OUT_DIR] [SEED]
#
# Run from the repository root with coplay installed (or PYTHONPATH pointing at it).
# Measured numbers: docs/results.md, "kuhn-text".
set -euo pipefail
OUT=${1:-runs/kuhn-text}
SEED=${2:-0}
COPLAY=${COPLAY:-python -m coplay.cli}

$COPLAY demos --game kuhn_poker --player random --games 1000 --seed "$SEED" \
    --out "$OUT/demos.jsonl" --force
$COPLAY sft --preset kuhn-text --data "$OUT/demos.jsonl" --out "$OUT/sft" --force \
    sft.epochs=4 train.seed="$SEED"
$COPLAY train --preset kuhn-text --out "$OUT/rl" --force \
    model.path="$OUT/sft/checkpoints/final" train.seed="$SEED"
# The output policy (the preset outputs the magnet), K=128 answers per information state.
$COPLAY eval "$OUT/rl" --samples 128 --episodes 200
