"""A tiny BEIR-layout dataset built on the fly: 24 documents in 6 topics over two corpus files, train and test
queries with graded qrels (the evaluation, ladder, training and eval-on-a-cluster tests share it)."""

from __future__ import annotations

import json
import random
from pathlib import Path

TOPICS = {
    "malaria": "mosquito parasite vaccine fever",
    "insulin": "diabetes glucose pancreas hormone",
    "telomere": "chromosome ageing cell division",
    "microbiome": "gut bacteria flora digestion",
    "prion": "protein misfolding brain disease",
    "antibody": "immune response b cell antigen",
}


def write_beir(root: Path, *, seed: int = 3) -> Path:
    """A tiny BEIR folder: 2 corpus files, queries, graded train/test qrels."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    docs, queries, qrels = [], [], {"train": [], "test": []}
    filler = "study result method sample analysis data effect patients trial model".split()
    for t, (topic, words) in enumerate(TOPICS.items()):
        for j in range(4):
            text = " ".join(rng.sample(filler, 5) + words.split()[: 2 + j % 3] + [topic] * (1 + j % 2))
            docs.append({"_id": f"d{t}{j}", "title": f"{topic} paper {j}", "text": text})
        for split, k in (("train", 0), ("test", 1)):
            qid = f"{split[:2]}{t}"
            queries.append({"_id": qid, "text": f"what is known about {topic} {words.split()[k]}"})
            qrels[split] += [(qid, f"d{t}0", 2), (qid, f"d{t}1", 1), (qid, f"d{t}3", 0)]
    (root / "corpus-00.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs[:10]))
    (root / "corpus-01.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs[10:]))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels").mkdir(exist_ok=True)
    for split, rows in qrels.items():
        (root / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows)
        )
    return root
