"""Bulk tagging on Ray Data: ``python -m spacy_nldm tag INPUT OUTPUT --model NAME_OR_PATH``.

How a run goes:

1. The input (a file, a folder or a glob) is split into shards, one per file; each shard has an output file
   named after its path relative to the input (``OUTPUT/<rel>.parquet`` or ``.spacy``). Shards whose output
   exists are skipped: a run that was killed, started again, does only the missing ones.
2. The driver scans each pending shard once: it checks every record (reporting malformed ones with file and
   line, kept for ``OUTPUT/_errors/<rel>.jsonl``), counts the good ones and cuts the shard into chunks of
   ``batch_size`` documents (byte ranges of a text file, row ranges of a Parquet row group).
3. The chunks of all pending shards form one Ray dataset (one block per chunk), mapped by an actor pool
   (``map_batches`` with :class:`TaggerActor`, ``workers`` actors): each actor loads the pipeline once,
   reads its chunks from the input files itself (so on a cluster the inputs are on shared storage) and
   runs them through ``nlp.pipe``. The whole run is one dataset, so the pipeline is loaded once per worker.
4. The driver collects the tagged rows by shard; when a shard has as many documents as its scan counted it
   is written atomically (a temporary file in the output folder, then ``os.replace``), with its errors file.
   A shard that ends with fewer or more documents than counted, or with a line twice, stops the run.

Ray is imported inside the functions: the package imports without it.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

RAY_MISSING = ('Ray Data is not installed; install it with: pip install "spacy-nldm[ray]" (in a checkout, with the '
               'pinned versions: pip install -c constraints.txt torch==2.13.0 -e ".[ray]")')
INPUT_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".txt": "text", ".parquet": "parquet"}
OUTPUT_SUFFIXES = {"parquet": ".parquet", "docbin": ".spacy"}
ERRORS_DIR = "_errors"
# the output's own columns: a carried field of one of these names is renamed input_<name>
OUTPUT_COLUMNS = ("line", "row", "tokens", "tags", "heads", "probs", "ents")
TAGGER_FACTORIES = ("nldm_tagger", "crf_tagger")
#: the factories whose components give label marginals (``--probs``): the taggers over their labels, the entity
#: components over their tags (BIO or BILUO)
PROB_FACTORIES = TAGGER_FACTORIES + ("nldm_ner", "crf_ner")
MAX_REPORTED = 10  # malformed records printed per shard (all of them go to the errors file)


class BulkError(Exception):
    """A problem with the input, the output or the run, shown to the user without a traceback."""


def require_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as err:
        raise BulkError(RAY_MISSING) from err
    return ray


# --------------------------------------------------------------------------------------------- shards
@dataclass
class Shard:
    path: Path
    rel: str  # path relative to the input root (posix), names the outputs
    fmt: str  # jsonl | text | parquet
    output: Path
    errors_path: Path


@dataclass
class ShardPlan:
    """One pending shard after its scan: the good documents' count, the chunks, the malformed records."""

    index: int
    shard: Shard
    n_docs: int = 0
    chunks: List[Dict[str, Any]] = field(default_factory=list)
    errors: List[Dict[str, Any]] = field(default_factory=list)


def _has_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def find_shards(input: str, output: Path, out_format: str = "parquet", input_format: str = "auto") -> List[Shard]:
    """The input's shards, sorted by relative path: a file, the files of a folder (recursively: .jsonl,
    .ndjson, .txt, .parquet, or every file with ``input_format``) or the files matching a glob."""
    if out_format not in OUTPUT_SUFFIXES:
        raise BulkError(f"--format must be one of {sorted(OUTPUT_SUFFIXES)}, not {out_format!r}")
    if input_format != "auto" and input_format not in set(INPUT_FORMATS.values()):
        raise BulkError(f"--input-format must be auto, jsonl, text or parquet, not {input_format!r}")
    output = output.resolve()
    if _has_glob(input):
        parts = Path(input).parts
        fixed = [p for p in parts[: next(i for i, p in enumerate(parts) if _has_glob(p))]]
        root = Path(*fixed) if fixed else Path(".")
        files = [Path(p) for p in glob.glob(input, recursive=True) if Path(p).is_file()]
        explicit = True
    elif Path(input).is_dir():
        root = Path(input)
        files = [p for p in root.rglob("*") if p.is_file()]
        explicit = False
    elif Path(input).is_file():
        root = Path(input).parent
        files = [Path(input)]
        explicit = True
    else:
        raise BulkError(f"input {input!r} is not a file, a folder or a glob that matches files")
    shards, by_output = [], {}
    for path in sorted(files):
        resolved = path.resolve()
        if resolved == output or output in resolved.parents or any(
                part.startswith(".") for part in path.relative_to(root).parts):
            continue  # our own outputs (the output folder inside the input folder), hidden files and folders
        fmt = input_format if input_format != "auto" else INPUT_FORMATS.get(path.suffix.lower())
        if fmt is None:
            if explicit:
                raise BulkError(f"{path}: unknown input format (use a .jsonl, .txt or .parquet file, "
                                "or --input-format)")
            continue
        rel = path.relative_to(root).as_posix()
        stem = rel[: -len(path.suffix)] if path.suffix else rel
        out = output / (stem + OUTPUT_SUFFIXES[out_format])
        if out in by_output:
            raise BulkError(f"{by_output[out].path} and {path} would both be written to {out}: "
                            "rename one of them or tag them separately")
        shard = Shard(path, rel, fmt, out, output / ERRORS_DIR / (stem + ".jsonl"))
        by_output[out] = shard
        shards.append(shard)
    if not shards:
        raise BulkError(f"no input shards found in {input!r} (looked for {', '.join(INPUT_FORMATS)})")
    return shards


# ------------------------------------------------------------------------------------ records, scans
def parse_line(raw: bytes, fmt: str, text_key: str) -> Tuple[Optional[str], Optional[Dict], Optional[str]]:
    """A line (without its newline) -> (text, carried fields, problem); (None, None, None): a blank line."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        line = raw.decode("utf8")
    except UnicodeDecodeError as err:
        return None, None, f"not UTF-8 ({err.reason} at byte {err.start})"
    if not line.strip():
        return None, None, None
    if fmt == "text":
        return line, {}, None
    try:
        record = json.loads(line)
    except ValueError as err:
        return None, None, f"bad JSON: {err}"
    if not isinstance(record, dict):
        return None, None, f"not a JSON object but {type(record).__name__}"
    if text_key not in record:
        return None, None, f"no field {text_key!r}"
    text = record.pop(text_key)
    if not isinstance(text, str):
        return None, None, f"field {text_key!r} is {type(text).__name__}, not a string"
    return text, record, None


def _lines_with_offsets(path: Path) -> Iterator[Tuple[int, int, bytes]]:
    """(line number from 1, offset of the next line, line without its newline); a UTF-8 BOM is dropped."""
    offset = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            offset += len(raw)
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            yield number, offset, raw[:-1] if raw.endswith(b"\n") else raw


def scan_shard(plan: ShardPlan, text_key: str, chunk_size: int) -> ShardPlan:
    """Check every record of the shard, count the good ones and cut them into chunks."""
    shard = plan.shard
    if shard.fmt == "parquet":
        return _scan_parquet(plan, text_key, chunk_size)
    start, first, count = 0, 1, 0
    for number, end, raw in _lines_with_offsets(shard.path):
        text, _, problem = parse_line(raw, shard.fmt, text_key)
        if problem is not None:
            plan.errors.append({"file": str(shard.path), "line": number, "problem": problem,
                                "record": raw.decode("utf8", errors="replace")})
        elif text is not None:
            count += 1
            plan.n_docs += 1
        if count == chunk_size:
            plan.chunks.append(_chunk(plan, start, end, first, count))
            start, first, count = end, number + 1, 0
    if count:
        plan.chunks.append(_chunk(plan, start, end, first, count))
    return plan


def _chunk(plan: ShardPlan, start: int, stop: int, first: int, n_docs: int, group: int = -1) -> Dict[str, Any]:
    return {"shard": plan.index, "path": str(plan.shard.path.resolve()), "fmt": plan.shard.fmt, "start": start,
            "stop": stop, "first": first, "group": group, "n_docs": n_docs}


def _scan_parquet(plan: ShardPlan, text_key: str, chunk_size: int) -> ShardPlan:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(plan.shard.path)
    except (pa.ArrowException, OSError) as err:
        raise BulkError(f"{plan.shard.path}: not a readable Parquet file ({err})") from err
    names = pf.schema_arrow.names
    if text_key not in names:
        raise BulkError(f"{plan.shard.path}: no column {text_key!r} (columns: {', '.join(names)}); "
                        "name the text column with --text-key")
    kind = pf.schema_arrow.field(text_key).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise BulkError(f"{plan.shard.path}: column {text_key!r} is {kind}, not a string")
    row0 = 0
    for group in range(pf.num_row_groups):
        try:
            column = pf.read_row_group(group, columns=[text_key]).column(0)
        except (pa.ArrowException, OSError) as err:
            raise BulkError(f"{plan.shard.path}: row group {group} cannot be read ({err})") from err
        valid = column.is_valid().to_pylist()
        start, count, whole = 0, 0, None
        for i, ok in enumerate(valid):
            if not ok:
                whole = pf.read_row_group(group) if whole is None else whole
                record = whole.slice(i, 1).to_pylist()[0]
                plan.errors.append({"file": str(plan.shard.path), "row": row0 + i,
                                    "problem": f"column {text_key!r} is null",
                                    "record": json.dumps(record, ensure_ascii=False, default=str)})
                continue
            count += 1
            plan.n_docs += 1
            if count == chunk_size:
                plan.chunks.append(_chunk(plan, start, i + 1, row0, count, group))
                start, count = i + 1, 0
        if count:
            plan.chunks.append(_chunk(plan, start, len(valid), row0, count, group))
        row0 += len(valid)
    return plan


def read_chunk(chunk: Dict[str, Any], text_key: str, cache: Optional[Dict] = None
               ) -> List[Tuple[int, str, Dict]]:
    """The good records of a chunk: (line from 1, or row from 0 for Parquet; text; carried fields)."""
    path = Path(chunk["path"])
    if chunk["fmt"] == "parquet":
        key = (chunk["path"], chunk["group"])
        if cache is not None and cache.get("key") == key:
            table = cache["table"]
        else:
            import pyarrow.parquet as pq

            table = pq.ParquetFile(path).read_row_group(chunk["group"])
            if cache is not None:
                cache.update(key=key, table=table)
        rows = table.slice(chunk["start"], chunk["stop"] - chunk["start"]).to_pylist()
        out = []
        for i, row in enumerate(rows):
            text = row.pop(text_key)
            if text is not None:
                out.append((chunk["first"] + chunk["start"] + i, text, row))
        return out
    with path.open("rb") as f:
        f.seek(chunk["start"])
        data = f.read(chunk["stop"] - chunk["start"])
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    out = []
    for i, raw in enumerate(lines):
        number = chunk["first"] + i
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        text, fields, problem = parse_line(raw, chunk["fmt"], text_key)
        if text is not None and problem is None:
            out.append((number, text, fields))
    return out


# ------------------------------------------------------------------------------------------ pipeline
@dataclass
class PipelineFacts:
    """What the driver knows of the pipeline from its config (no weights loaded)."""

    taggers: List[str]  # nldm_tagger / crf_tagger components
    probs_settable: List[str]  # the components of ``scored`` whose config section has store_probs (spacy.load can set it)
    has_tree: bool  # an NLDM component: Token._.nldm_head is set
    prob_labels: Optional[List[str]]  # the last scored component's labels, or tags (the order of ``probs``)
    ents: bool = False  # a component that sets Doc.ents (its factory's ``assigns`` has "doc.ents")
    scored: List[str] = field(default_factory=list)  # the components of PROB_FACTORIES (taggers and entity components)


def sets_entities(factory: Optional[str]) -> bool:
    """Whether a factory's components set ``Doc.ents``, by the ``assigns`` it declares (spaCy's ``ner`` and
    ``entity_ruler``, this package's ``crf_ner`` and ``nldm_ner``); False for a factory spaCy does not know."""
    from spacy.language import Language

    try:
        return bool(factory) and Language.has_factory(factory) and "doc.ents" in Language.get_factory_meta(
            factory).assigns
    except ValueError:
        return False


def pipeline_dir(model: str) -> Path:
    import spacy.util

    path = Path(model)
    if path.is_dir():
        return path
    if spacy.util.is_package(model):
        package = spacy.util.get_package_path(model)
        found = sorted(package.glob("*/config.cfg")) + sorted(package.glob("config.cfg"))
        if found:
            return found[0].parent
    raise BulkError(f"--model {model!r}: not a pipeline folder nor an installed pipeline package")


def pipeline_facts(model: str) -> PipelineFacts:
    import spacy.util

    directory = pipeline_dir(model)
    if not (directory / "config.cfg").exists():
        raise BulkError(f"--model {model!r}: {directory} has no config.cfg (is it a spaCy pipeline folder?)")
    config = spacy.util.load_config(directory / "config.cfg", interpolate=False)
    nlp_cfg, components = config.get("nlp", {}), config.get("components", {})
    active = [n for n in nlp_cfg.get("pipeline", []) if n not in nlp_cfg.get("disabled", [])]
    taggers = [n for n in active if components.get(n, {}).get("factory") in TAGGER_FACTORIES]
    has_tree = any(str(components[n].get("model", {}).get("@architectures", "")).startswith("spacy-nldm.NLDMTagger")
                   for n in taggers)
    scored = [n for n in active if components.get(n, {}).get("factory") in PROB_FACTORIES]
    labels = None
    if scored:
        cfg = directory / scored[-1] / "cfg"
        if cfg.exists():
            labels = list(json.loads(cfg.read_text(encoding="utf8")).get("labels", []))
        if labels is not None and scored[-1] not in taggers:  # an entity component: its types -> its tags
            from .defaults import NER_COMMON
            from .structs import entity_labels

            labels = list(entity_labels(labels, components[scored[-1]].get("scheme", NER_COMMON["scheme"])))
    settable = [n for n in scored if "store_probs" in components[n]]
    ents = any(sets_entities(components.get(n, {}).get("factory")) for n in active)
    return PipelineFacts(taggers, settable, has_tree, labels, ents, scored)


class TaggerActor:
    """A Ray Data worker: loads the pipeline once, then tags chunks (one per call) read from the inputs."""

    def __init__(self, model: str, text_key: str, overrides: Dict, use_gpu: bool, threads: int,
                 pipe_batch_size: Optional[int], has_tree: bool, probs: bool, docbin: bool,
                 taggers: Tuple[str, ...] = (), ents: bool = False, scored: Tuple[str, ...] = ()):
        import spacy

        if use_gpu:  # Ray set CUDA_VISIBLE_DEVICES to this worker's GPU: device 0 is ours
            from thinc.api import set_gpu_allocator

            set_gpu_allocator("pytorch")  # as `spacy train`: one memory pool shared by CuPy and torch
            spacy.require_gpu()
        try:
            import torch

            torch.set_num_threads(max(1, threads))
        except ImportError:  # pragma: no cover - torch is a dependency
            pass
        self.nlp = spacy.load(model, config=overrides)
        for name in scored if probs else ():
            self.nlp.get_pipe(name).store_probs = True
        from .pipeline.extensions import register_extensions

        register_extensions()
        tree = any(getattr(getattr(self.nlp.get_pipe(name), "model", None), "attrs", {}).get("structure") == "tree"
                   for name in taggers)
        if tree != has_tree:
            raise RuntimeError(f"[spacy-nldm] {model}: the config says the pipeline {'does' if has_tree else 'does not'} "
                               f"decode latent trees, the loaded pipeline {'does' if tree else 'does not'}")
        self.text_key, self.pipe_batch_size = text_key, pipe_batch_size
        self.heads, self.probs, self.docbin = has_tree and not docbin, probs, docbin
        self.ents = ents and not docbin
        self.cache: Dict = {}

    def records(self, chunks: List[Dict[str, Any]]) -> List[Tuple[int, int, str, Dict]]:
        out = []
        for chunk in chunks:
            records = read_chunk(chunk, self.text_key, self.cache)
            if len(records) != chunk["n_docs"]:
                raise RuntimeError(f"[spacy-nldm] {chunk['path']}: a chunk had {chunk['n_docs']} documents when "
                                   f"scanned and {len(records)} when read (was the file changed during the run?)")
            out.extend((chunk["shard"], number, text, fields) for number, text, fields in records)
        return out

    def __call__(self, batch):
        import pyarrow as pa

        records = self.records(batch.to_pylist())
        kwargs = {"batch_size": self.pipe_batch_size} if self.pipe_batch_size else {}
        docs = list(self.nlp.pipe((text for _, _, text, _ in records), **kwargs))
        columns = {
            "shard": pa.array([r[0] for r in records], pa.int32()),
            "line": pa.array([r[1] for r in records], pa.int64()),
            "meta": pa.array([json.dumps(r[3], ensure_ascii=False, default=str) if r[3] else "" for r in records],
                             pa.string()),
            "n_words": pa.array([len(doc) for doc in docs], pa.int64()),
        }
        if self.docbin:
            columns["doc"] = pa.array([doc.to_bytes(exclude=["tensor"]) for doc in docs], pa.binary())
        else:
            columns["tokens"] = pa.array([[t.text for t in doc] for doc in docs], pa.list_(pa.string()))
            columns["tags"] = pa.array([[t.tag_ for t in doc] for doc in docs], pa.list_(pa.string()))
            if self.heads:
                columns["heads"] = pa.array([[-1 if t._.nldm_head is None else t._.nldm_head for t in doc]
                                             for doc in docs], pa.list_(pa.int32()))
            if self.probs:
                columns["probs"] = pa.array(
                    [None if doc._.nldm_probs is None else doc._.nldm_probs.tolist() for doc in docs],
                    pa.list_(pa.list_(pa.float32())))
            if self.ents:
                columns["ents"] = pa.array([[{"start": e.start, "end": e.end, "label": e.label_,
                                              "start_char": e.start_char, "end_char": e.end_char,
                                              "prob": e._.nldm_prob}
                                             for e in doc.ents] for doc in docs], ents_type())
        return pa.table(columns)


# ---------------------------------------------------------------------------------------------- output
def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` through ``write(tmp)`` on a temporary file beside it, then ``os.replace``: readers see
    the old file or the whole new one. The writer creates the file, so its mode follows the umask, as any
    other file's (``mkstemp`` would make it 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_errors(plan: ShardPlan) -> None:
    path = plan.shard.errors_path
    if plan.errors:
        def write(tmp: Path) -> None:
            with tmp.open("w", encoding="utf8") as f:
                for error in plan.errors:
                    f.write(json.dumps(error, ensure_ascii=False) + "\n")
        _atomic_write(path, write)
    elif path.exists():
        path.unlink()  # from an earlier run of a shard that was not finished


def _carried_columns(metas: List[str]) -> Dict[str, Any]:
    import pyarrow as pa

    records = [json.loads(m) if m else {} for m in metas]
    names: Dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record))
    columns = {}
    for name in names:
        values = [record.get(name) for record in records]
        try:
            array = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):  # mixed types: as JSON text
            array = pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in values],
                             pa.string())
        out = name
        while out in OUTPUT_COLUMNS or out in columns:
            out = "input_" + out
        columns[out] = array
    return columns


def _write_shard(plan: ShardPlan, table, out_format: str, facts: PipelineFacts, model: str, probs: bool) -> int:
    """Write a finished shard (atomically, after its errors file); return its number of words."""
    import pyarrow as pa

    line = "row" if plan.shard.fmt == "parquet" else "line"
    if table is None:
        table = _empty_rows(out_format, facts.has_tree, probs, facts.ents)
    table = table.sort_by("line")
    lines = table.column("line").to_pylist()
    if len(lines) != plan.n_docs or len(set(lines)) != len(lines):
        raise BulkError(f"{plan.shard.path}: {plan.n_docs} documents in, {len(lines)} out "
                        f"({len(lines) - len(set(lines))} repeated): not writing {plan.shard.output}")
    words = int(sum(table.column("n_words").to_pylist()))
    _write_errors(plan)
    if out_format == "docbin":
        from spacy.tokens import Doc, DocBin
        from spacy.vocab import Vocab

        vocab = Vocab()
        docbin = DocBin(store_user_data=True)
        for number, meta, data in zip(lines, table.column("meta").to_pylist(), table.column("doc").to_pylist()):
            doc = Doc(vocab).from_bytes(data)
            doc.user_data["spacy_nldm.source"] = {"file": plan.shard.rel, line: number,
                                                  "fields": json.loads(meta) if meta else {}}
            docbin.add(doc)
        _atomic_write(plan.shard.output, lambda tmp: tmp.write_bytes(docbin.to_bytes()))
        return words
    import pyarrow.parquet as pq

    columns = _carried_columns(table.column("meta").to_pylist())
    columns[line] = table.column("line")
    for name in ("tokens", "tags", "heads", "probs", "ents"):
        if name in table.column_names:
            columns[name] = table.column(name)
    metadata = {"spacy_nldm.model": model, "spacy_nldm.source": plan.shard.rel}
    if probs:
        metadata["spacy_nldm.prob_labels"] = json.dumps(facts.prob_labels)
    out = pa.table(columns).replace_schema_metadata(metadata)
    _atomic_write(plan.shard.output, lambda tmp: pq.write_table(out, tmp))
    return words


def ents_type():
    """The ``ents`` column's type: per document, its entities' token span [start, end), label, characters
    [start_char, end_char) and probability (``Span._.nldm_prob`` of the entity components; null for others)."""
    import pyarrow as pa

    return pa.list_(pa.struct([("start", pa.int32()), ("end", pa.int32()), ("label", pa.string()),
                               ("start_char", pa.int32()), ("end_char", pa.int32()), ("prob", pa.float32())]))


def _empty_rows(out_format: str, heads: bool, probs: bool, ents: bool = False):
    import pyarrow as pa

    fields = [("shard", pa.int32()), ("line", pa.int64()), ("meta", pa.string()), ("n_words", pa.int64())]
    if out_format == "docbin":
        fields.append(("doc", pa.binary()))
    else:
        fields += [("tokens", pa.list_(pa.string())), ("tags", pa.list_(pa.string()))]
        if heads:
            fields.append(("heads", pa.list_(pa.int32())))
        if probs:
            fields.append(("probs", pa.list_(pa.list_(pa.float32()))))
        if ents:
            fields.append(("ents", ents_type()))
    return pa.schema(fields).empty_table()


# ------------------------------------------------------------------------------------------------ run
@dataclass
class Summary:
    shards: int = 0
    done: int = 0
    skipped: int = 0
    docs: int = 0
    words: int = 0
    errors: int = 0
    seconds: float = 0.0
    attempts: int = 0

    @property
    def words_per_second(self) -> float:
        return self.words / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> List[str]:
        return [f"shards: {self.done} tagged, {self.skipped} skipped (output exists), {self.shards} in all",
                f"documents: {self.docs}, words: {self.words}, malformed records: {self.errors}",
                f"time: {self.seconds:.1f} s, {self.words_per_second:.0f} words/s"
                + (f" ({self.attempts} attempts)" if self.attempts > 1 else "")]


def tag_corpus(input: str, output: Path, model: str, *, workers: int = 1, batch_size: int = 1000,
               pipe_batch_size: Optional[int] = None, text_key: str = "text", input_format: str = "auto",
               out_format: str = "parquet", probs: bool = False, num_gpus: float = 0.0,
               cpus_per_worker: float = 1.0, address: Optional[str] = None, num_cpus: Optional[int] = None,
               retries: int = 2, log: Callable[[str], None] = print, warn: Optional[Callable[[str], None]] = None,
               actor_cls: type = TaggerActor) -> Summary:
    """Tag every shard of ``input`` whose output is missing; see the module's docstring.

    Uses the Ray instance of this process if there is one (left running), else starts one (``address``:
    join a cluster, None: a local instance with ``num_cpus`` CPUs) and shuts it down at the end.
    """
    warn = warn or (lambda text: print(text, file=sys.stderr))
    if workers < 1 or batch_size < 1:
        raise BulkError("--workers and --batch-size must be at least 1")
    if num_gpus < 0 or cpus_per_worker < 0:
        raise BulkError("--num-gpus and --cpus-per-worker must not be negative")
    output = Path(output)
    shards = find_shards(input, output, out_format, input_format)
    facts = pipeline_facts(model)
    if probs and not facts.scored:
        raise BulkError(f"--probs needs an nldm_tagger, crf_tagger, nldm_ner or crf_ner component; {model} has none")
    # store_probs through the config (spacy.load validates overrides against config.cfg, where spaCy writes
    # every factory setting); a config without it (written by hand) gets the attribute set after loading
    overrides = {"components": {name: {"store_probs": True} for name in facts.probs_settable}} if probs else {}
    summary = Summary(shards=len(shards))
    pending = []
    for shard in shards:
        if shard.output.exists():
            summary.skipped += 1
            log(f"skip {shard.rel}: {shard.output} exists")
        else:
            pending.append(shard)
            for stale in shard.output.parent.glob(f".{shard.output.name}.*.tmp"):  # from a killed run
                stale.unlink()
    if not pending:
        log("nothing to do: every output shard exists")
        return summary
    ray = require_ray()
    started = not ray.is_initialized()
    if started:
        init = {"address": address, "log_to_driver": True, "logging_level": logging.WARNING}
        if address is None:
            init.update(num_cpus=num_cpus, include_dashboard=False)
            _quiet_local_ray()
        ray.init(**{k: v for k, v in init.items() if v is not None or k == "address"})
        _quiet_ray_data()
    t0 = time.perf_counter()
    try:
        actor_kwargs = dict(model=str(Path(model).resolve()) if Path(model).is_dir() else model, text_key=text_key,
                            overrides=overrides, use_gpu=num_gpus > 0, threads=max(1, int(cpus_per_worker)),
                            pipe_batch_size=pipe_batch_size, has_tree=facts.has_tree,
                            probs=probs, docbin=out_format == "docbin", taggers=tuple(facts.taggers),
                            ents=facts.ents, scored=tuple(facts.scored))
        for attempt in range(retries + 1):
            summary.attempts = attempt + 1
            todo = [shard for shard in pending if not shard.output.exists()]
            if not todo:
                break
            try:
                _run_once(ray, todo, summary, facts, model, text_key, batch_size, workers, num_gpus,
                          cpus_per_worker, out_format, probs, actor_kwargs, actor_cls, log, warn)
                break
            except BulkError:
                raise
            except Exception as err:  # a worker or the cluster failed: the finished shards are kept
                if _from_user_code(ray, err):  # our code (or the pipeline) raised: it would again
                    raise BulkError(f"a worker failed: {_worker_error(err)} (the shards written so far are kept; "
                                    "Ray's log above has the worker's traceback)") from err
                if attempt == retries:
                    raise
                left = sum(not shard.output.exists() for shard in todo)
                warn(f"warning: the run failed ({type(err).__name__}: {str(err).splitlines()[0][:300]}); "
                     f"running the {left} unfinished shards again")
    finally:
        summary.seconds = time.perf_counter() - t0
        if started:
            ray.shutdown()
    return summary


def _quiet_local_ray() -> None:
    """For a local Ray instance started by this command (no cluster of the user's): no token authentication
    (nothing else connects to it; Ray would print a warning and write a token to ~/.ray). A variable the user
    has set is left as it is."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _quiet_ray_data() -> None:
    """Ray Data's progress report (every 10 s, at INFO) is left out: this command prints a line per shard."""
    logging.getLogger("ray.data").setLevel(logging.WARNING)


def _from_user_code(ray, err: BaseException) -> bool:
    """Whether ``err`` is an exception raised in a worker's Python code (Ray Data's UserCodeException):
    such a run is not retried. Workers that died (a crash, a lost node) are restarted by Ray Data itself
    (its actor pools have ``max_restarts=-1, max_task_retries=-1``); what fails all the same is retried."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ray.exceptions.UserCodeException):
            return True
        err = err.__cause__
    return False


def _worker_error(err: BaseException) -> str:
    """The worker's own exception line (``ValueError: ...``) from the traceback text Ray passes on."""
    lines = [line.strip() for line in str(err).splitlines()]
    found = [line for line in lines if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit)\b[^:]*: ", line)
             and not line.startswith("ray.")]
    return found[0] if found else f"{type(err).__name__}: {lines[0] if lines else ''}"


def _run_once(ray, shards: List[Shard], summary: Summary, facts: PipelineFacts, model: str, text_key: str,
              batch_size: int, workers: int, num_gpus: float, cpus_per_worker: float, out_format: str, probs: bool,
              actor_kwargs: Dict, actor_cls: type, log, warn) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    plans, chunks = {}, []
    for index, shard in enumerate(shards):
        plan = scan_shard(ShardPlan(index, shard), text_key, batch_size)
        plans[index] = plan
        chunks.extend(plan.chunks)
        for error in plan.errors[:MAX_REPORTED]:
            where = f"line {error['line']}" if "line" in error else f"row {error['row']}"
            warn(f"warning: {shard.path}: {where}: {error['problem']} (kept in {shard.errors_path})")
        if len(plan.errors) > MAX_REPORTED:
            warn(f"warning: {shard.path}: {len(plan.errors) - MAX_REPORTED} more malformed records "
                 f"(all in {shard.errors_path})")
    start = time.perf_counter()

    def finish(plan: ShardPlan, table) -> None:
        words = _write_shard(plan, table, out_format, facts, model, probs)
        summary.done += 1
        summary.docs += plan.n_docs
        summary.words += words
        summary.errors += len(plan.errors)
        rate = summary.words / max(time.perf_counter() - start, 1e-9)
        log(f"[{summary.done + summary.skipped}/{summary.shards}] wrote {plan.shard.output.name} "
            f"({plan.shard.rel}): {plan.n_docs} docs, {words} words, {len(plan.errors)} malformed; "
            f"{rate:.0f} words/s so far")

    for plan in list(plans.values()):
        if plan.n_docs == 0:
            finish(plan, None)
            del plans[plan.index]
    if not chunks:
        return
    from ray.data import ActorPoolStrategy

    dataset = ray.data.from_items(chunks, override_num_blocks=len(chunks))
    tagged = dataset.map_batches(
        actor_cls, batch_size=1, batch_format="pyarrow", compute=ActorPoolStrategy(size=workers),
        fn_constructor_kwargs=actor_kwargs, num_cpus=cpus_per_worker, num_gpus=num_gpus or None)
    parts: Dict[int, List] = {}
    counts: Dict[int, int] = {}
    for table in tagged.iter_batches(batch_size=None, batch_format="pyarrow"):
        if table.num_rows == 0:
            continue
        shard_ids = table.column("shard").to_numpy()
        for index in sorted(set(shard_ids.tolist())):
            rows = table.filter(pc.equal(table.column("shard"), index))
            if index not in plans:
                raise BulkError(f"rows of an unknown or finished shard ({index}) came back: stopping")
            parts.setdefault(index, []).append(rows)
            counts[index] = counts.get(index, 0) + rows.num_rows
            plan = plans[index]
            if counts[index] > plan.n_docs:
                raise BulkError(f"{plan.shard.path}: {plan.n_docs} documents in, more than that came back")
            if counts[index] == plan.n_docs:
                finish(plan, pa.concat_tables(parts.pop(index)))
                del plans[index]
    if plans:
        missing = ", ".join(f"{p.shard.rel} ({counts.get(i, 0)} of {p.n_docs} documents)" for i, p in plans.items())
        raise BulkError(f"the run ended with shards incomplete: {missing}")
