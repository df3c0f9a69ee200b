"""projects/paper/runs/queue.py and records.py: the run queue that projects/paper/scripts/reproduce.py and
projects/paper/scripts/synthetic_runs.py share, and the runs file every harness keeps its runs in."""
import json
import os
import subprocess
import sys

import pytest

from nldm_fixtures import ROOT

from projects.paper.runs import queue as runs
from projects.paper.runs.records import RunsFile, claim


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_lock_is_held_by_one_live_process(tmp_path):
    lock = tmp_path / "a" / "run.lock"
    assert claim(lock) and lock.read_text() == str(os.getpid())
    assert not claim(lock)  # held by a live process (this one)
    lock.write_text(str(dead_pid()))
    assert claim(lock)  # its holder died: taken over
    lock.write_text("half written")
    assert claim(lock)


def test_queue_skips_done_and_held_runs_goes_on_after_a_failure_and_stops_when_told(tmp_path, capsys):
    runs_file = RunsFile(tmp_path / "runs.jsonl")
    queue = [runs.Run(f"r{i}", f"set/r{i}", (i,)) for i in range(5)]
    runs_file.add({"key": "set/r0", "done": "before"})
    runs_file.lock("set/r1").parent.mkdir(parents=True)
    runs_file.lock("set/r1").write_text(str(os.getpid()))  # another worker holds r1
    done = []

    def work(run):
        done.append(run.name)
        if run.params == (2,):
            raise runs.RunFailed("spacy train exited with status 1; see log")
        return {"value": run.params[0]}

    failed = runs.run_queue(runs_file, queue, work, stop=lambda: "time is up" if len(done) == 2 else None)
    assert failed == 1 and done == ["r2", "r3"]
    out = capsys.readouterr().out
    assert "spacy train exited with status 1; see log" in out  # the failure's reason reaches the log
    assert runs_file.rows() == {"set/r0": {"key": "set/r0", "done": "before"}, "set/r3": {"key": "set/r3", "value": 3}}
    assert "time is up" in out  # and so does the reason to stop
    assert [p.name for p in runs_file.lock("x").parent.iterdir()] == [runs_file.lock("set/r1").name]  # ours released


@pytest.mark.parametrize("args,want", [
    (["--training.max_steps", "5", "--nlp.lang=xx"], {"training.max_steps": "5", "nlp.lang": "xx"}),
    ([], {}),
])
def test_overrides_from_the_command_line(args, want):
    assert runs.parse_overrides(args) == want


def test_a_row_made_with_another_fingerprint_is_redone_and_the_new_one_kept(tmp_path, capsys):
    runs_file = RunsFile(tmp_path / "runs.jsonl")
    old, current, missing = (runs.Run(f"r{i}", f"r{i}", (i,), fingerprint="abc") for i in range(3))
    runs_file.add({"key": "r0", "value": "old config"})  # made before fingerprints (or with another config)
    runs_file.add({"key": "r1", "value": "kept", "fingerprint": "abc"})
    done = []
    assert runs.run_queue(runs_file, [old, current, missing],
                          lambda run: done.append(run.name) or {"value": run.params[0]}) == 0
    assert done == ["r0", "r2"]
    assert "redo r0" in capsys.readouterr().out
    rows = runs_file.rows()
    assert rows["r0"] == {"key": "r0", "value": 0, "fingerprint": "abc"} and rows["r1"]["value"] == "kept"
    assert all(run.done(rows) for run in (old, current, missing))
    assert len(list(runs_file.lines())) == 4  # the old row stays in the file, the last of its key counts


def test_a_row_without_a_required_field_is_redone(tmp_path, capsys):
    """Run.required: a row made before the run stored a field (Table 2's per-sentence counts) is done again."""
    runs_file = RunsFile(tmp_path / "runs.jsonl")
    without, with_counts = (runs.Run(f"r{i}", f"r{i}", (i,), fingerprint="abc", required=("counts",))
                            for i in range(2))
    runs_file.add({"key": "r0", "value": "old", "fingerprint": "abc"})
    runs_file.add({"key": "r1", "value": "kept", "fingerprint": "abc", "counts": [1]})
    rows = runs_file.rows()
    assert without.stale(rows["r0"]) == "made without counts" and with_counts.stale(rows["r1"]) is None
    done = []
    runs.run_queue(runs_file, [without, with_counts], lambda run: done.append(run.name) or {"value": 1, "counts": [2]})
    assert done == ["r0"] and "redo r0: its row" in capsys.readouterr().out
    rows = runs_file.rows()
    assert rows["r1"]["value"] == "kept" and without.done(rows)


def test_a_runs_file_reads_back_what_was_added_and_names_a_bad_line(tmp_path):
    runs_file = RunsFile(tmp_path / "sub" / "runs.jsonl")
    assert runs_file.rows() == {}  # no file yet: no runs
    row = {"key": "en/nldm-seed0", "test_correct": [3, 0, 12], "scores": {"x": [1.5, -2e-3, 1e20]}, "words": ["a"]}
    runs_file.add(row)
    assert runs_file.rows() == {"en/nldm-seed0": row}
    with pytest.raises(ValueError, match="needs a"):
        runs_file.add({"value": 1})
    with runs_file.path.open("a") as f:
        f.write("\n{not json\n")
    with pytest.raises(ValueError, match=r"runs.jsonl:3: not a JSON line"):
        runs_file.rows()


def test_rows_added_by_several_processes_at_once_are_all_kept_whole(tmp_path):
    path = tmp_path / "runs.jsonl"
    code = ("import sys; from projects.paper.runs.records import RunsFile; f = RunsFile(sys.argv[1]); "
            "[f.add({'key': f'{sys.argv[2]}/{i}', 'pad': 'x' * 5000}) for i in range(200)]")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(n)], cwd=ROOT) for n in range(3)]
    assert all(p.wait() == 0 for p in procs)
    assert sorted(RunsFile(path).rows()) == sorted(f"{n}/{i}" for n in range(3) for i in range(200))


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
    records = RunsFile(ROOT / "projects" / "paper" / "results" / "runs.jsonl").rows()
    assert len(records) >= 4 * 7 * 3
    for system in ("softmax", "crf1", "crf2", "nldm"):
        config = Config().from_disk(ROOT / "configs" / f"{system}.cfg", interpolate=False)
        assert migrate_config(config) == []
        current = config_fingerprint(config.to_str(interpolate=False), budget)
        for key, record in records.items():
            if record["system"] == system:
                assert record["fingerprint"] == current, key


def test_queue_runs_jobs_at_a_time_and_reports_each_row(tmp_path):
    """jobs = 2: two runs are in work at once (each waits for the other at a barrier: one at a time would time
    out), every row is added and reported once, a failure is counted."""
    import threading

    runs_file = RunsFile(tmp_path / "runs.jsonl")
    barrier = threading.Barrier(2, timeout=20)
    reported = []

    def work(run):
        if run.params[0] < 2:
            barrier.wait()
        if run.params[0] == 3:
            raise runs.RunFailed("no")
        return {"value": run.params[0]}

    queue = [runs.Run(f"r{i}", f"r{i}", (i,)) for i in range(4)]
    failed = runs.run_queue(runs_file, queue, work, jobs=2, report=lambda run, row: reported.append(row["value"]))
    assert failed == 1 and sorted(reported) == [0, 1, 2]
    assert {key: row["value"] for key, row in runs_file.rows().items()} == {"r0": 0, "r1": 1, "r2": 2}
