#!/usr/bin/env bash
# Packs what a lent GPU machine lacks into .devcarry/ (git-ignored), to carry there with a run's command.
# That machine's image has Python 3.12 with torch, numpy, numba, CuPy and pytest, but no spaCy. This writes:
#   .devcarry/site.tar.xz   spaCy, thinc and their dependencies (the versions of constraints.txt), the peers
#                           (torch-struct 0.5, pytorch-crf 0.7.2) and this package, unpacked and xz-compressed
#                           (about 37 MB: the wheels alone are over the 64 MiB a run may carry)
#   .devcarry/corpus/       the converted corpora (corpus/, from `spacy project run corpora` and `ud-corpora projects/paper`), where present
#
#   projects/paper/scripts/device_prepare.sh [PYTHON_VERSION]     (default 3.12; takes about 3 minutes)
#
# On the machine, projects/paper/scripts/device_run.sh unpacks it and runs a command (see there).
set -euo pipefail
PYV=${1:-3.12}
DEST=.devcarry
PACKAGES="spacy thinc blis cymem murmurhash preshed srsly wasabi catalogue confection weasel spacy-legacy
spacy-loggers cloudpathlib smart-open pydantic pydantic-core annotated-types typing-inspection"
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
du -sh "$DEST"/*
echo "== carry .devcarry with: bash projects/paper/scripts/device_run.sh COMMAND..."
