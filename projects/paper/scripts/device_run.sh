#!/usr/bin/env bash
# Runs a command on a lent GPU machine with what projects/paper/scripts/device_prepare.sh packed into
# .devcarry/ (carry that folder): unpacks spaCy, the peers and this package to /tmp/site, puts them on the
# path, and runs the command in the repository root. For example, in one call:
#
#   bash projects/paper/scripts/device_run.sh bash projects/paper/scripts/gpu_checks.sh
#   bash projects/paper/scripts/device_run.sh python3 -m projects.paper spacy-train --jobs 16 \
#       --corpus .devcarry/corpus --results "$OUT/runs.jsonl" --workdir /tmp/spacy_train --seeds 0,1,2
#
# (spacy-train writes each run as it finishes, so the runs done before a time limit come back.)
set -euo pipefail
[ -f .devcarry/site.tar.xz ] || { echo "device_run: no .devcarry/site.tar.xz; run device_prepare.sh here first" >&2; exit 2; }
rm -rf /tmp/site && tar -xJf .devcarry/site.tar.xz -C /tmp
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -c "import spacy, thinc, torch, numpy, spacy_nldm; print('device_run: spacy', spacy.__version__, 'thinc', thinc.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, '| cores', __import__('os').cpu_count())"
# (the NLDM's compiled loops are built on first use and cached beside the sources in /tmp/site)
exec "$@"
