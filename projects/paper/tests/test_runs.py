"""projects/paper/runs/queue.py: the run queue that projects/paper/scripts/reproduce.py and projects/paper/scripts/synthetic_runs.py share."""
import json
import os
import subprocess
import sys

import pytest

from nldm_fixtures import ROOT

from projects.paper.runs import queue as runs


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_lock_is_held_by_one_live_process(tmp_path):
    lock = tmp_path / "a" / "run.lock"
    assert runs.claim(lock) and lock.read_text() == str(os.getpid())
    assert not runs.claim(lock)  # held by a live process (this one)
    lock.write_text(str(dead_pid()))
    assert runs.claim(lock)  # its holder died: taken over
    lock.write_text("half written")
    assert runs.claim(lock)


def test_queue_skips_done_and_held_runs_goes_on_after_a_failure_and_stops_when_told(tmp_path, capsys):
    queue = [runs.Run(f"r{i}", tmp_path / f"r{i}.json", (i,)) for i in range(5)]
    queue[0].record.write_text('{"done": "before"}')
    (tmp_path / "r1.lock").write_text(str(os.getpid()))  # another worker holds r1
    done = []

    def work(run):
        done.append(run.name)
        if run.params == (2,):
            raise runs.RunFailed("spacy train exited with status 1; see log")
        return {"value": run.params[0]}

    failed = runs.run_queue(queue, work, stop=lambda: "time is up" if len(done) == 2 else None)
    assert failed == 1 and done == ["r2", "r3"]
    out = capsys.readouterr().out
    assert "spacy train exited with status 1; see log" in out  # the failure's reason reaches the log
    assert json.loads(queue[0].record.read_text()) == {"done": "before"}
    assert not queue[2].record.exists() and json.loads(queue[3].record.read_text()) == {"value": 3}
    assert not queue[4].record.exists() and "time is up" in out  # and so does the reason to stop
    assert sorted(p.name for p in tmp_path.glob("*.lock")) == ["r1.lock"]  # ours released, the other kept


@pytest.mark.parametrize("args,want", [
    (["--training.max_steps", "5", "--nlp.lang=xx"], {"training.max_steps": "5", "nlp.lang": "xx"}),
    ([], {}),
])
def test_overrides_from_the_command_line(args, want):
    assert runs.parse_overrides(args) == want


def test_a_record_made_with_another_fingerprint_is_redone_and_the_new_one_kept(tmp_path, capsys):
    old, current, missing = (runs.Run(f"r{i}", tmp_path / f"r{i}.json", (i,), fingerprint="abc") for i in range(3))
    old.record.write_text('{"value": "old config"}')  # made before fingerprints (or with another config)
    current.record.write_text('{"value": "kept", "fingerprint": "abc"}')
    done = []
    assert runs.run_queue([old, current, missing], lambda run: done.append(run.name) or {"value": run.params[0]}) == 0
    assert done == ["r0", "r2"]
    assert "redo r0" in capsys.readouterr().out
    assert json.loads(old.record.read_text()) == {"value": 0, "fingerprint": "abc"}
    assert json.loads(current.record.read_text())["value"] == "kept"
    assert all(run.done() for run in (old, current, missing))


def test_a_record_without_a_required_field_is_redone(tmp_path, capsys):
    """Run.required: a record made before the run stored a field (Table 2's per-sentence counts) is done again."""
    without, with_counts = (runs.Run(f"r{i}", tmp_path / f"r{i}.json", (i,), fingerprint="abc", required=("counts",))
                            for i in range(2))
    without.record.write_text('{"value": "old", "fingerprint": "abc"}')
    with_counts.record.write_text('{"value": "kept", "fingerprint": "abc", "counts": [1]}')
    assert without.stale() == "made without counts" and with_counts.stale() is None
    done = []
    runs.run_queue([without, with_counts], lambda run: done.append(run.name) or {"value": 1, "counts": [2]})
    assert done == ["r0"] and "redo r0: its record" in capsys.readouterr().out
    assert json.loads(with_counts.record.read_text())["value"] == "kept" and without.done()


def test_a_record_reads_back_as_written_with_number_lists_on_one_line(tmp_path):
    record = {"test_correct": [3, 0, 12], "scores": {"x": [1.5, -2e-3, 1e20]}, "words": ["a", "b"], "empty": []}
    runs.write_json(tmp_path / "r.json", record)
    text = (tmp_path / "r.json").read_text()
    assert json.loads(text) == record
    assert '"test_correct": [3, 0, 12]' in text and '"x": [1.5, -0.002, 1e+20]' in text


def test_the_config_fingerprint_is_the_configs_settings_and_the_budget():
    """Comments and the order of sections and keys leave a Table 2 fingerprint as it is; a value or the budget
    changes it."""
    from projects.paper.scripts.reproduce import config_fingerprint

    budget = {"max_epochs": 8}
    config = ('[components]\n\n[components.nldm]\nfactory = "nldm_tagger"\nlabel_smoothing = 0.0\n\n'
              "[components.nldm.model]\nmax_dist = 3\n")
    reordered = ('[components]\n\n# the NLDM\n[components.nldm]\nlabel_smoothing = 0.0\nfactory = "nldm_tagger"\n\n'
                 "[components.nldm.model]\n# its longest arc\nmax_dist = 3\n")
    assert config_fingerprint(reordered, budget) == config_fingerprint(config, budget)
    assert config_fingerprint(config.replace("max_dist = 3", "max_dist = 2"), budget) != config_fingerprint(config, budget)
    assert config_fingerprint(config, {"max_epochs": 9}) != config_fingerprint(config, budget)


def test_table2_records_are_current_for_the_migrated_configs():
    """The committed Table 2 runs carry the fingerprint of configs/<system>.cfg as 0.2 writes it (the 0.2
    migration drops the removed settings at their defaults and renames the architectures, and leaves a 0.2
    config as it is), at the budget of the committed table (vars.full_max_epochs=8)."""
    from thinc.api import Config

    from projects.paper.scripts.migrate_runs_0_2 import migrate_config
    from projects.paper.scripts.reproduce import config_fingerprint

    budget = {"max_epochs": 8, "max_steps": 0, "patience": 2000, "eval_frequency": 0}
    records = sorted((ROOT / "projects" / "paper" / "results" / "runs").glob("*/*.json"))
    assert len(records) >= 4 * 7 * 3
    for system in ("softmax", "crf1", "crf2", "nldm"):
        config = Config().from_disk(ROOT / "configs" / f"{system}.cfg", interpolate=False)
        assert migrate_config(config) == []
        current = config_fingerprint(config.to_str(interpolate=False), budget)
        for path in records:
            if path.name.startswith(f"{system}-seed"):
                assert json.loads(path.read_text())["fingerprint"] == current, path
