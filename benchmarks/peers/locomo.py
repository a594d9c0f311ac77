"""LoCoMo dev as a retrieval benchmark: workspaces per conversation, questions, evidence recall.

One workspace per conversation (sample) and per retrieval unit, as in the LoCoMo
paper (Maharana et al., 2024, Table 3), which retrieves within one conversation:
- ``turns``: one memory per dialog turn (``D3:7``), text ``Speaker: words`` plus the
  shared photo's caption when there is one;
- ``observations``: one memory per observation; it carries the dialog ids it cites;
- ``summaries``: one memory per session summary; a hit is the summary of a session
  that holds the evidence.
Every system indexes the same files (YAML frontmatter + that text). Recall for one
question is |evidence found| / |evidence|, averaged over questions; categories 1-4
are the headline, "all" adds category 5 (adversarial) whose evidence lists exist
in this data. Malformed evidence strings are repaired where the intent is clear
(``"D8:6; D9:17"`` → two ids, ``"D:11:26"`` → ``D11:26``) and dropped otherwise
(``"D"``); questions with no usable evidence are left out and counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

UNITS = ("turns", "observations", "summaries")
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_EVIDENCE_RE = re.compile(r"D:?(\d+):(\d+)")
_DATE_RE = re.compile(r"on (\d{1,2}) (\w+),? (\d{4})")
_MONTHS = {
    m: i
    for i, m in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ],
        1,
    )
}
# Published retrieval recall (LoCoMo paper, Table 3, DRAGON retriever, overall), from the data README.
PAPER_RECALL = {
    "turns": {5: 56.7, 10: 66.2, 25: 76.7, 50: 82.7},
    "observations": {5: 56.2, 10: 61.3, 25: 67.5, 50: 71.2},
    "summaries": {5: 72.1, 10: 84.7},
}


def parse_evidence(items: Iterable[str] | None) -> list[str]:
    """Dialog ids from an evidence list, repairing the malformed forms found in the data."""
    found: list[str] = []
    for item in items or []:
        for session, turn in _EVIDENCE_RE.findall(str(item)):
            dia = f"D{int(session)}:{int(turn)}"
            if dia not in found:
                found.append(dia)
    return found


def session_of(dia_id: str) -> int:
    return int(dia_id[1:].split(":")[0])


@dataclass
class Question:
    text: str
    category: int
    evidence: list[str]  # dialog ids


@dataclass
class LocomoWorkspace:
    """One conversation written out for one unit: where, which file holds which evidence."""

    sample_id: str
    unit: str
    root: Path
    files: dict[str, list[str]] = field(default_factory=dict)  # rel path -> dialog ids (or "S<n>")
    questions: list[Question] = field(default_factory=list)
    skipped_questions: int = 0

    def evidence_keys(self, question: Question) -> set[str]:
        if self.unit == "summaries":
            return {f"S{session_of(d)}" for d in question.evidence}
        return set(question.evidence)

    def recall(self, question: Question, hits: list[str]) -> float:
        wanted = self.evidence_keys(question)
        if not wanted:
            return 0.0
        got: set[str] = set()
        for path in hits:
            got.update(self.files.get(path, ()))
        return len(wanted & got) / len(wanted)


def load_samples(data_dir: Path) -> list[dict]:
    return json.loads((data_dir / "locomo-dev" / "locomo-dev.json").read_text(encoding="utf-8"))


def _iso_date(text: str) -> str | None:
    match = _DATE_RE.search(text or "")
    if not match:
        return None
    day, month, year = match.groups()
    number = _MONTHS.get(month.lower())
    return f"{int(year):04d}-{number:02d}-{int(day):02d}" if number else None


def _write(root: Path, rel: str, mem_id: str, created: str | None, tags: list[str], body: str) -> None:
    lines = ["---", f"id: {mem_id}", "type: daily"]
    if created:
        lines.append(f"created: {created}")
    if tags:
        lines.append("tags: [" + ", ".join(tags) + "]")
    lines.append("---")
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n" + body.strip() + "\n", encoding="utf-8")


def _tag(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "speaker"


def write_workspace(sample: dict, unit: str, root: Path, *, max_questions: int | None = None) -> LocomoWorkspace:
    """Write one conversation as memory files for ``unit`` under ``root``; return the mapping."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; expected one of {UNITS}")
    conv = sample["conversation"]
    ws = LocomoWorkspace(sample_id=str(sample.get("sample_id", "sample")), unit=unit, root=root)
    dates = {
        int(k.split("_")[1]): _iso_date(v)
        for k, v in conv.items()
        if k.startswith("session_") and k.endswith("_date_time")
    }
    folder = "02-daily"
    if unit == "turns":
        for key, turns in conv.items():
            if not (key.startswith("session_") and isinstance(turns, list)):
                continue
            session = int(key.split("_")[1])
            for turn in turns:
                dia = str(turn.get("dia_id", ""))
                if not _EVIDENCE_RE.fullmatch(dia):
                    continue
                s, t = dia[1:].split(":")
                mem_id = f"d{s}-{t}"
                text = f"{turn.get('speaker', '')}: {turn.get('text', '')}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                rel = f"{folder}/{mem_id}.md"
                _write(root, rel, mem_id, dates.get(session), [_tag(turn.get("speaker", ""))], text)
                ws.files[rel] = [dia]
    elif unit == "observations":
        for key, by_speaker in sample.get("observation", {}).items():
            session = int(key.split("_")[1])
            n = 0
            for speaker, items in by_speaker.items():
                for item in items:
                    text, cited = item[0], item[1]
                    cited_ids = parse_evidence(cited if isinstance(cited, list) else [cited])
                    n += 1
                    mem_id = f"obs-s{session}-{n}"
                    rel = f"{folder}/{mem_id}.md"
                    _write(root, rel, mem_id, dates.get(session), [_tag(speaker)], text)
                    ws.files[rel] = cited_ids
    else:
        for key, text in sample.get("session_summary", {}).items():
            session = int(key.split("_")[1])
            mem_id = f"summary-s{session}"
            rel = f"{folder}/{mem_id}.md"
            _write(root, rel, mem_id, dates.get(session), [], text)
            ws.files[rel] = [f"S{session}"]
    for qa in sample.get("qa", []):
        evidence = parse_evidence(qa.get("evidence"))
        if not evidence:
            ws.skipped_questions += 1
            continue
        ws.questions.append(Question(str(qa.get("question", "")), int(qa.get("category", 0)), evidence))
    if max_questions is not None:
        ws.questions = ws.questions[:max_questions]
    return ws


def summarise_recall(per_question: list[tuple[Question, float]]) -> dict[str, float | int]:
    """Mean recall (percent) for categories 1-4, for all, and per category."""

    def mean(values: list[float]) -> float:
        return round(100.0 * sum(values) / len(values), 1) if values else 0.0

    out: dict[str, float | int] = {
        "cat1_4": mean([r for q, r in per_question if q.category in (1, 2, 3, 4)]),
        "all": mean([r for _q, r in per_question]),
        "questions": len(per_question),
    }
    for cat, name in CATEGORY_NAMES.items():
        values = [r for q, r in per_question if q.category == cat]
        if values:
            out[f"cat{cat}_{name}"] = mean(values)
    return out
