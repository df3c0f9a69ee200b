#!/usr/bin/env bash
# The checks that need a GPU, in one run (CI has none): the CUDA tests, `python -m projects.paper structs --device cuda`
# with the peers (torch-struct, pytorch-crf) on the same GPU, and `bench pipeline --gpu-id 0`.
#
#   projects/paper/scripts/gpu_checks.sh [ARK_FILE] [OUT_DIR]
#
# ARK_FILE: the tweets `bench pipeline` trains on (default ../shared/data/twitter_pos/oct27.traindev;
# falls back to the test fixture's first tweets). OUT_DIR (default $OUT, else gpu-checks/) receives
# each step's log and Markdown table. Every step has its own time limit, so that one slow step still
# leaves the others' results; the script's status is the number of steps that failed.
# Needs: torch with CUDA, this package's dependencies (spaCy 3.8, thinc 8.3, CuPy for thinc's GPU ops),
# the peers (`pip install --no-deps torch-struct==0.5 pytorch-crf==0.7.2`), pytest.
set -u
DATA=${1:-../shared/data/twitter_pos/oct27.traindev}
[ -f "$DATA" ] || DATA=tests/fixtures/mirror/twitter_pos/oct27.train
OUT_DIR=${2:-${OUT:-gpu-checks}}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
failed=0

step() {  # step NAME SECONDS COMMAND...: run, log to OUT_DIR/NAME.log, count a failure
    local name=$1 limit=$2
    shift 2
    echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*"
    timeout "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
    local rc=$?
    tail -n 60 "$OUT_DIR/$name.log"
    echo "== $name: rc $rc"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

nvidia-smi -L
python3 -c "import torch, spacy, thinc; print('torch', torch.__version__, torch.cuda.get_device_name(0), '| spacy', spacy.__version__, '| thinc', thinc.__version__)"
step pytest_cuda 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_cuda.py \
    tests/test_structs_tree.py::test_cuda_matches_cpu
step bench_structs_cuda 200 python3 -m projects.paper structs --device cuda --lengths 10,30,60 --labels 17,25 \
    --peers --output "$OUT_DIR/bench_structs_cuda.md"
step bench_pipeline_cuda 150 python3 -m spacy_nldm bench pipeline "$DATA" --gpu-id 0 \
    --output "$OUT_DIR/bench_pipeline_cuda.md"
echo "== $failed step(s) failed"
exit "$failed"
