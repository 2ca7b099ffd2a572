"""Writing data/: the task prompts and preference pairs of every split, and their manifest."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from course_utils import tasks
from course_utils.preference_pairs import make_preference_pairs


def jsonl_text(records) -> str:
    """JSON lines, ASCII only, one "\\n" per record: the same bytes on every machine."""
    return "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in records)


def write_data(data_dir: str | os.PathLike | None = None, seed: int = tasks.DEFAULT_SEED) -> dict:
    """Write the prompts and preference pairs of every split, plus manifest.json; return the manifest.

    Files: {split}.jsonl (prompts) and pairs_{split}.jsonl for split in train/validation/test, and
    test_unseen.jsonl: the test prompts in instruction phrasings no other split uses.
    Byte-identical for the same seed (no timestamps; fixed key order; "\\n" line ends).
    """
    data_dir = Path(data_dir) if data_dir is not None else tasks.default_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    contents = {}
    splits = tasks.make_all_splits(seed)
    for split, prompts in splits.items():
        contents[f"{split}.jsonl"] = (jsonl_text(p.to_dict() for p in prompts), len(prompts))
        pairs = make_preference_pairs(prompts, seed)
        contents[f"pairs_{split}.jsonl"] = (jsonl_text(pairs), len(pairs))
    unseen = tasks.make_unseen_split(splits["test"])  # held out twice: numbers/words and phrasing
    contents[f"{tasks.UNSEEN_SPLIT}.jsonl"] = (jsonl_text(p.to_dict() for p in unseen), len(unseen))
    manifest = {
        "generator": "course_utils.machinery.data_files.write_data",
        "format_version": tasks.DATA_FORMAT_VERSION,
        "seed": seed,
        "families": list(tasks.TASK_FAMILIES),
        "files": {},
    }
    for name, (text, count) in contents.items():
        raw = text.encode("utf-8")
        (data_dir / name).write_bytes(raw)
        manifest["files"][name] = {"count": count, "sha256": hashlib.sha256(raw).hexdigest()}
    (data_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
