"""mvi-bench: metric fixtures, parser, protocol, adapters (incl. a stub server on 127.0.0.1), cache
and resume, shards, VLMEvalKit round trip, readers and their errors, the fuzz check."""
from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from conftest import REPO, run_tool
from fuzzing import DEFAULT_KINDS, FuzzCase, check_malformed, run_inprocess

TOOL = "mvi-bench"
FILM = REPO.parent / "shared" / "data" / "film"


def cli(capsys, *argv):
    code, out, err = run_inprocess(TOOL, [str(a) for a in argv], capsys)
    return code, out, err


def js(capsys, *argv):
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """12 synthetic pairs (2 per category), made once."""
    from icmlkit.lib.mvi_bench import SynthConfig, make_synth

    d = tmp_path_factory.mktemp("synth") / "s"
    make_synth(SynthConfig(pairs=12, size=96), d, seed=0)
    return d


def copy_synth(synth, tmp_path, edit=None):
    d = tmp_path / "data"
    shutil.copytree(synth, d)
    if edit is not None:
        recs = json.loads((d / "annotations.json").read_text())
        edit(recs)
        (d / "annotations.json").write_text(json.dumps(recs))
    return d


# ----------------------------------------------------------------------------------- the metric

def _rec(pid, cat, typ, correct, valid=True, sub=""):
    return {"id": f"{pid}-{typ}", "pair_id": pid, "category": cat, "type": typ, "correct": correct,
            "valid": valid, "subcategory": sub, "model": "fixture"}


FIXTURE = [  # (pair, category, normal right, misleading right)
    ("r1", "resemblance", True, False), ("r2", "resemblance", True, True), ("r3", "resemblance", True, False),
    ("r4", "resemblance", False, True),
    ("m1", "material", False, True), ("m2", "material", False, False),  # Acc_n = 0 -> NaN
    ("i1", "illusion", False, True), ("i2", "illusion", True, True),    # negative MVI-S
]


def fixture_records():
    out = []
    for pid, cat, n, m in FIXTURE:
        out.append(_rec(pid, cat, "normal", n))
        out.append(_rec(pid, cat, "misleading", m, valid=pid != "i1"))
    return out


def test_metric_equals_hand_computed_values(tmp_path, capsys):
    p = tmp_path / "pred.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in fixture_records()))
    s = js(capsys, "score", p, "--bootstrap", 200, "-o", tmp_path / "t.csv")
    # overall pooled: Acc_n = 4/8, Acc_m = 5/8, MVI-S = (0.5 - 0.625) / 0.5 = -0.25
    assert (s["acc_normal"], s["acc_misleading"], s["mvi_sensitivity"]) == (0.5, 0.625, -0.25)
    # b (normal right, misleading wrong) = 2, c = 3: McNemar exact p = 1; flip = 2 / 4 normal-right
    assert s["flip_rate"] == 0.5 and s["mcnemar_p"] == 1.0 and s["invalid_rate"] == 1 / 16
    r = s["per_category"]["resemblance"]
    assert (r["acc_normal"], r["acc_misleading"], r["mvi_sensitivity"]) == (0.75, 0.5, round(1 / 3, 6))
    assert r["flip_rate"] == round(2 / 3, 6)
    assert s["per_category"]["material"]["mvi_sensitivity"] is None          # Acc_n = 0: NaN, not 0
    assert s["per_category"]["illusion"]["mvi_sensitivity"] == -1.0
    assert s["per_level"]["concept"]["mvi_sensitivity"] == round(1 / 3, 6)
    assert s["per_level"]["attribute"]["mvi_sensitivity"] is None
    # pooled overall differs from the mean of the defined per-category values
    assert s["mvi_sensitivity"] != pytest.approx((1 / 3 - 1) / 2)
    lo, hi = s["mvi_sensitivity_ci"]
    assert lo <= s["mvi_sensitivity"] <= hi


def test_mcnemar_and_nan_rules():
    from icmlkit.lib.mvi_bench import mcnemar_exact, mvi_sensitivity

    assert mcnemar_exact(6, 0) == pytest.approx(2 * 0.5 ** 6)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == pytest.approx(1.0)
    assert math.isnan(mvi_sensitivity(0.0, 0.5)) and mvi_sensitivity(0.8, 0.4) == pytest.approx(0.5)


def test_circular_item_is_right_only_when_every_rotation_is():
    from icmlkit.lib.mvi_bench.config import ScoreConfig
    from icmlkit.lib.mvi_bench.metric import score_records

    recs = []
    for rot, ok in enumerate([True, True, False]):
        recs.append(("f", 1, {**_rec("p", "mirror", "normal", ok), "rotation": rot}))
        recs.append(("f", 1, {**_rec("p", "mirror", "misleading", True), "rotation": rot}))
    s = score_records(recs, ScoreConfig(bootstrap=0)).summary
    assert s["acc_normal"] == 0.0 and s["acc_misleading"] == 1.0


def test_circular_consistency_per_category_with_a_scripted_model(synth, tmp_path, capsys):
    """A scripted model whose CircularEval consistency is known per category: resemblance answers
    the gold letter (1), representation always 'A' (right in exactly one shift: 0), material the
    gold letter on normal images and 'A' on misleading ones (0.5; MVI-S 1), every other category the
    gold letter except on shift 1 (0, while its vanilla accuracy is 1)."""
    from icmlkit.lib.mvi_bench import api, read_dataset
    from icmlkit.lib.mvi_bench.config import LETTERS, RunConfig, ScoreConfig
    from icmlkit.lib.mvi_bench.metric import markdown_table
    from icmlkit.lib.mvi_bench.models import Model
    from icmlkit.lib.mvi_bench.protocol import permutation

    class Scripted(Model):
        name = "scripted"

        def answer(self, req):
            item, rot = req.key.rsplit("/", 1)
            cat = item.split("_")[0]
            wrong = LETTERS[(LETTERS.index(req.gold) + 1) % len(req.options)]
            if cat == "representation" or (cat == "material" and "misleading" in item):
                return "A"
            if cat in ("resemblance", "material"):
                return req.gold
            return wrong if rot == "1" else req.gold

    ds = read_dataset(synth)
    res = api.run(RunConfig(model="scripted", circular=True), ds, model=Scripted())
    assert res.summary["circular_consistency"] == pytest.approx(6 / 24)  # 4 resemblance + 2 material items of 24
    recs = res.records
    out = tmp_path / "c.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in recs))
    s = js(capsys, "score", out, "--bootstrap", 0, "-o", tmp_path / "c.md")
    cc = {c: v["circular_consistency"] for c, v in s["per_category"].items()}
    assert cc == {"resemblance": 1.0, "representation": 0.0, "material": 0.5, "mirror": 0.0, "occlusion": 0.0,
                  "illusion": 0.0}
    va = {c: v["vanilla_accuracy"] for c, v in s["per_category"].items()}
    # representation's vanilla accuracy: the items whose gold option is shown as A at the seeded order
    rep = [n for n, _ in ds.pairs if n.category == "representation"]
    at_a = sum(permutation(0, n.pair_id, len(n.choices))[0] == n.choices.index(n.answer) for n in rep)
    assert va["representation"] == at_a / len(rep)
    assert va["resemblance"] == va["mirror"] == va["occlusion"] == va["illusion"] == 1.0
    assert s["per_category"]["material"]["mvi_sensitivity"] == 1.0
    assert s["circular_consistency"] == pytest.approx(0.25) and s["per_level"]["concept"]["circular_consistency"] == 0.5
    assert "circular consistency" in (tmp_path / "c.md").read_text()
    # a plain (non-circular) run has no CircularEval figures
    plain = api.run(RunConfig(model="scripted"), ds, model=Scripted())
    assert plain.summary["circular_consistency"] is None and plain.summary["vanilla_accuracy"] is None
    assert "circular consistency" not in markdown_table(api.score(ScoreConfig(bootstrap=0), [
        ("r", i + 1, r) for i, r in enumerate(plain.records)]).rows)


# ----------------------------------------------------------------------------------- the parser

OPTIONS = ["a cat", "a coffee cup", "a rocket", "a motorcycle"]


@pytest.mark.parametrize("reply,robust,official,extract", [
    ("B", "B", "B", "B"), (" c.", "C", None, "C"), ("Answer: D", "D", "D", "D"),
    ("The answer is (A)", "A", "A", "A"), ("(B) a coffee cup", "B", "B", "B"), ("B. a coffee cup", "B", "B", "B"),
    ("a rocket", "C", None, "A"), ("It is a motorcycle.", "D", None, "A"), ("A cat sits here", "A", "A", "A"),
    ("", None, None, None), ("I cannot tell", None, None, "C"), ("a cat or a rocket", None, None, "A"),
    ("E", None, None, None), ("Answer: A or B", "A", "A", "A"), ("xyz", None, None, None),
    ("ANSWER:B2", None, None, "B"),
])
def test_parser_table(reply, robust, official, extract):
    from icmlkit.lib.mvi_bench import parse_reply

    assert parse_reply(reply, OPTIONS, "robust") == robust
    assert parse_reply(reply, OPTIONS, "official") == official
    assert parse_reply(reply, OPTIONS, "official-extract") == extract


def test_official_parser_letters_beyond_the_options_are_invalid():
    from icmlkit.lib.mvi_bench import parse_reply

    assert parse_reply("C", ["yes", "no"], "official") is None and parse_reply("B", ["yes", "no"], "official") == "B"


# ----------------------------------------------------------------------------------- protocol

def test_one_seeded_permutation_per_pair(synth, tmp_path, capsys):
    out1, out2, out3 = (tmp_path / f"{k}.jsonl" for k in "abc")
    js(capsys, "run", synth, "--model", "random", "-o", out1, "--seed", 3)
    js(capsys, "run", synth, "--model", "random", "-o", out2, "--seed", 3)
    js(capsys, "run", synth, "--model", "random", "-o", out3, "--seed", 4)
    recs = [json.loads(x) for x in out1.read_text().splitlines()]
    again = [json.loads(x) for x in out2.read_text().splitlines()]
    assert [{**r, "latency_s": 0} for r in recs] == [{**r, "latency_s": 0} for r in again]
    by_pair = {}
    for r in recs:
        by_pair.setdefault(r["pair_id"], []).append(tuple(r["permutation"]))
    assert all(len(set(v)) == 1 and len(v) == 2 for v in by_pair.values())
    other = [json.loads(x)["permutation"] for x in out3.read_text().splitlines()]
    assert other != [r["permutation"] for r in recs]


def test_prompt_is_the_official_template():
    from icmlkit.lib.mvi_bench import build_prompt
    from icmlkit.lib.mvi_bench.protocol import options_from_prompt

    p = build_prompt("Q?", ["x", "y"])
    assert p == "Q?\nChoices:\nA. x\nB. y\nAnswer with the letter from the given choices directly."
    assert options_from_prompt(p) == ("Q?", ["x", "y"])


def test_circular_asks_every_shift(synth, tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    s = js(capsys, "run", synth, "--model", "oracle", "--circular", "-o", out)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert s["n_prompts"] == len(recs) > 24
    first = [r for r in recs if r["id"] == recs[0]["id"]]
    assert len(first) == len(first[0]["permutation"]) and len({tuple(r["permutation"]) for r in first}) == len(first)


# ----------------------------------------------------------------------------------- models

def test_oracle_is_perfect_and_random_is_chance(synth, tmp_path, capsys):
    o, r = tmp_path / "o.jsonl", tmp_path / "r.jsonl"
    js(capsys, "run", synth, "--model", "oracle", "-o", o)
    so = js(capsys, "score", o)
    assert so["acc_normal"] == so["acc_misleading"] == 1.0 and so["mvi_sensitivity"] == 0.0
    js(capsys, "run", synth, "--model", "random", "-o", r)
    recs = [json.loads(x) for x in r.read_text().splitlines()]
    assert {x["letter"] for x in recs} <= set("ABCD") and all(x["valid"] for x in recs)


def test_stub_server_payload_and_no_key_in_the_manifest(synth, tmp_path, capsys, monkeypatch):
    from icmlkit.lib.mvi_bench.models import Oracle
    from icmlkit.lib.mvi_bench.server import serve

    class Echo(Oracle):  # the server cannot know the gold letter: it answers 'B' always
        def answer(self, req):
            return "B"

    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak-123")
    out = tmp_path / "h.jsonl"
    with serve(Echo()) as srv:
        s = js(capsys, "run", synth, "--model", srv.spec("tiny-vlm"), "--concurrency", 3, "-o", out)
        payloads = list(srv.payloads)
    assert s["n_prompts"] == 24 and len(payloads) == 24
    p = payloads[0]
    assert p["temperature"] == 0.0 and p["max_tokens"] == 5 and p["model"] == "tiny-vlm"
    content = p["messages"][0]["content"]
    assert p["messages"][0]["role"] == "user" and content[0]["type"] == "image_url" and content[1]["type"] == "text"
    assert content[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert content[1]["text"].endswith("Answer with the letter from the given choices directly.")
    assert p["authorization"] == "Bearer sk-do-not-leak-123"
    manifest = (tmp_path / "h.jsonl.manifest.json").read_text()
    assert "sk-do-not-leak-123" not in manifest and "sk-do-not-leak-123" not in out.read_text()
    m = json.loads(manifest)
    rs = m["parameters"]["run_settings"]
    assert rs["temperature"] == 0.0 and rs["max_pixels"] == 401408 and rs["template_hash"] == s["template_hash"]
    assert {r["letter"] for r in map(json.loads, out.read_text().splitlines())} == {"B"}


def test_http_and_local_adapters_give_identical_tables(synth, tmp_path, capsys):
    from icmlkit.lib.mvi_bench.models import RandomModel
    from icmlkit.lib.mvi_bench.server import serve

    local, http = tmp_path / "l.jsonl", tmp_path / "h.jsonl"
    js(capsys, "run", synth, "--model", "effnet", "--device", "cpu", "-o", local)
    from icmlkit.lib.mvi_bench.models import EffnetScorer

    with serve(EffnetScorer()) as srv:
        js(capsys, "run", synth, "--model", srv.spec("effnet"), "--concurrency", 4, "-o", http)
    js(capsys, "score", local, "-o", tmp_path / "l.csv")
    js(capsys, "score", http, "-o", tmp_path / "h.csv")
    assert (tmp_path / "l.csv").read_bytes() == (tmp_path / "h.csv").read_bytes()
    assert RandomModel  # (imported for symmetry with the benchmark)


def test_unreachable_endpoint_exits_1_naming_the_url(synth, tmp_path, capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = tmp_path / "x.jsonl"
    code, _, err = cli(capsys, "run", synth, "--model", f"openai://127.0.0.1:{port}/v1?model=m", "--max-retries", 0,
                       "-o", out)
    assert code == 1 and f"127.0.0.1:{port}" in err and err.startswith("Error:")
    assert not out.exists() and not (tmp_path / "x.jsonl.cache.jsonl").exists()


def test_judge_sees_no_gold_answer(synth, tmp_path, capsys):
    from icmlkit.lib.mvi_bench import read_dataset
    from icmlkit.lib.mvi_bench.models import Judge, Oracle
    from icmlkit.lib.mvi_bench.server import serve

    class Mumble(Oracle):
        def answer(self, req):
            return "hmm"

    class JudgeModel(Oracle):
        def answer(self, req):
            return "A"

    out = tmp_path / "j.jsonl"
    with serve(Mumble()) as model_srv, serve(JudgeModel()) as judge_srv:
        s = js(capsys, "run", synth, "--model", model_srv.spec(), "--judge", judge_srv.spec("judge"), "-o", out)
        judged = list(judge_srv.payloads)
    assert s["n_judged"] == 24 and s["invalid_rate"] == 0.0 and len(judged) == 24
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["letter"] for r in recs} == {"A"} and {r["reply"] for r in recs} == {"hmm"}
    items = {it.id: it for it in read_dataset(synth).items}
    for p, r in zip(judged, recs):  # text only, no image, and exactly question + options + reply
        text = p["messages"][0]["content"]
        assert isinstance(text, str) and p["model"] == "judge"
    expected = set()
    for r in recs:
        it = items[r["id"]]
        opts = "\n".join(f"{'ABCD'[j]}. {it.choices[k]}" for j, k in enumerate(r["permutation"]))
        expected.add(Judge.PROMPT.format(question=it.question, options=opts, reply="hmm"))
    assert {p["messages"][0]["content"] for p in judged} == expected
    assert not any("gold" in t.lower() or "correct" in t.lower() for t in expected)


# ----------------------------------------------------------------------------------- cache, resume, shards

def test_killed_run_resumes_to_identical_records(synth, tmp_path):
    from icmlkit.lib.mvi_bench import RunConfig, api, read_dataset

    ds = read_dataset(synth)
    full = api.run(RunConfig(model="random"), ds, seed=1)
    cache = str(tmp_path / "p.jsonl.cache.jsonl")
    with pytest.raises(KeyboardInterrupt):
        api.run(RunConfig(model="random"), ds, seed=1, cache_path=cache, stop_after=9)
    assert len(open(cache).read().splitlines()) == 9
    with open(cache, "a") as fh:  # a kill can cut the last line
        fh.write('{"key": "trunc')
    res = api.run(RunConfig(model="random"), ds, seed=1, cache_path=cache, resume=True)
    assert res.summary["n_cached"] == 9
    strip = [{k: v for k, v in r.items() if k != "latency_s"} for r in res.records]
    assert strip == [{k: v for k, v in r.items() if k != "latency_s"} for r in full.records]
    with pytest.raises(Exception, match="--resume"):
        api.run(RunConfig(model="random"), ds, seed=1, cache_path=cache)


def test_resume_through_the_cli_gives_the_same_table(synth, tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    js(capsys, "run", synth, "--model", "random", "-o", a)
    # b: pre-fill the cache with a's first lines as a killed run would have left it
    js(capsys, "run", synth, "--model", "random", "-o", b)
    lines = (tmp_path / "b.jsonl.cache.jsonl").read_text().splitlines()[:7]
    b.unlink()
    (tmp_path / "b.jsonl.manifest.json").unlink()
    (tmp_path / "b.jsonl.cache.jsonl").write_text("\n".join(lines) + "\n")
    s = js(capsys, "run", synth, "--model", "random", "-o", b, "--resume")
    assert s["n_cached"] == 7
    js(capsys, "score", a, "-o", tmp_path / "a.md")
    js(capsys, "score", b, "-o", tmp_path / "b.md")
    assert (tmp_path / "a.md").read_bytes() == (tmp_path / "b.md").read_bytes()


def test_shards_concatenate_to_the_full_run(synth, tmp_path, capsys):
    full = tmp_path / "full.jsonl"
    js(capsys, "run", synth, "--model", "random", "-o", full)
    parts = []
    for k in (1, 2, 3):
        p = tmp_path / f"part{k}.jsonl"
        js(capsys, "run", synth, "--model", "random", "--shard", f"{k}/3", "-o", p)
        parts.append(p)

    def strip(text):
        return [{k: v for k, v in json.loads(x).items() if k != "latency_s"} for x in text.splitlines()]

    assert strip("".join(p.read_text() for p in parts)) == strip(full.read_text())
    s_full = js(capsys, "score", full)
    s_parts = js(capsys, "score", *parts)
    assert s_full == s_parts
    code, _, err = cli(capsys, "score", parts[0], parts[0])
    assert code == 1 and "duplicate" in err


# ----------------------------------------------------------------------------------- VLMEvalKit

def test_vlmeval_tsv_round_trip(synth, tmp_path, capsys):
    import csv

    tsv = tmp_path / "MVI.tsv"
    s = js(capsys, "export-vlmeval", synth, "-o", tsv)
    assert s["n_rows"] == 24
    rows = list(csv.DictReader(tsv.open(), delimiter="\t"))
    assert set(rows[0]) >= {"index", "image", "question", "A", "B", "C", "D", "answer", "category", "l2-category"}
    import base64

    assert base64.b64decode(rows[0]["image"])[:4] == b"\x89PNG"
    for i, r in enumerate(rows):  # a fake model: right on normal images, 'A' on misleading ones
        r["prediction"] = r["answer"] if r["type"] == "normal" else "A"
    pred = tmp_path / "model_MVI.tsv"
    with pred.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter="\t")
        w.writeheader()
        w.writerows(rows)
    recs = tmp_path / "recs.jsonl"
    js(capsys, "import-vlmeval", pred, "-o", recs, "--model-name", "fake")
    sc = js(capsys, "score", recs)
    n_a = sum(r["answer"] == "A" for r in rows if r["type"] == "misleading")
    assert sc["acc_normal"] == 1.0 and sc["acc_misleading"] == round(n_a / 12, 6) and sc["model"] == "fake"
    # the exported order is the run's order with the same seed
    run_out = tmp_path / "o.jsonl"
    js(capsys, "run", synth, "--model", "oracle", "-o", run_out)
    perms = {json.loads(x)["id"]: json.loads(x)["permutation"] for x in run_out.read_text().splitlines()}
    assert all(json.loads(r["permutation"]) == perms[r["item_id"]] for r in rows)


# ----------------------------------------------------------------------------------- readers

def test_parquet_layout_with_adversarial_type(synth, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = json.loads((synth / "annotations.json").read_text())
    table = pa.table({
        "image": [{"bytes": (synth / r["image"]).read_bytes(), "path": r["image"]} for r in recs],
        "question": [r["question"] for r in recs], "choices": [json.dumps(r["choices"]) for r in recs],
        "answer": [r["answer"] for r in recs], "category": [r["category"] for r in recs],
        "type": ["adversarial" if r["type"] == "misleading" else "normal" for r in recs],
        "source": [r["source"] for r in recs]})
    pq.write_table(table, tmp_path / "test.parquet")
    s = js(capsys, "run", tmp_path / "test.parquet", "--model", "oracle", "-o", tmp_path / "p.jsonl")
    assert s["n_pairs"] == 12 and s["acc_misleading"] == 1.0


def _drop_first_misleading(recs):
    del recs[1]


@pytest.mark.parametrize("edit,needle", [
    (lambda recs: recs[0].update(image="images/nope.png"), "field image"),
    (lambda recs: recs[0].update(category="colour"), "field category"),
    (lambda recs: recs[0].update(answer="a unicorn"), "field answer"),
    (_drop_first_misleading, "unpaired"),
    (lambda recs: recs[0].update(type="weird"), "field type"),
    (lambda recs: recs[0].update(choices="not json"), "field choices"),
])
def test_bad_annotations_exit_1_naming_file_item_and_field(synth, tmp_path, capsys, edit, needle):
    d = copy_synth(synth, tmp_path, edit)
    out = tmp_path / "o.jsonl"
    code, _, err = cli(capsys, "run", d, "--model", "oracle", "-o", out)
    assert code == 1 and err.startswith("Error:") and "annotations.json" in err and needle in err, err
    assert "item " in err and not out.exists()


def test_pairing_by_order_when_ids_say_nothing(synth, tmp_path, capsys):
    def renumber(recs):
        for i, r in enumerate(recs):
            r["id"] = f"x{i}"

    d = copy_synth(synth, tmp_path, renumber)
    code, _, err = cli(capsys, "run", d, "--model", "oracle", "-o", tmp_path / "a.jsonl")
    assert code == 1 and "unpaired" in err and "--pairing order" in err
    s = js(capsys, "run", d, "--model", "oracle", "--pairing", "order", "-o", tmp_path / "b.jsonl")
    assert s["n_pairs"] == 12


def test_corrupt_image_and_unreadable_parquet_exit_1(synth, tmp_path, capsys):
    d = copy_synth(synth, tmp_path)
    (d / "images" / "material_000_normal.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    code, _, err = cli(capsys, "run", d, "--model", "oracle", "-o", tmp_path / "o.jsonl")
    assert code == 1 and "material_000_normal" in err and "field image" in err
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"PAR1 not really")
    code, _, err = cli(capsys, "run", bad, "--model", "oracle", "-o", tmp_path / "o.jsonl")
    assert code == 1 and "x.parquet" in err and "parquet" in err


@pytest.mark.skipif(not FILM.exists(), reason="../shared/data/film is absent")
def test_film_reader_pairs_illusions_with_controls():
    from icmlkit.lib.mvi_bench import read_dataset

    ds = read_dataset(FILM)
    assert len(ds.pairs) == 60 and all(n.type == "normal" and m.type == "misleading" for n, m in ds.pairs)
    assert {n.category for n, _ in ds.pairs} == {"illusion"}
    assert {n.subcategory for n, _ in ds.pairs} == {"angle", "color", "length", "shape", "size"}
    assert all("control" in n.image_path and "original" in m.image_path for n, m in ds.pairs)
    assert all(it.answer in it.choices for it in ds.items)


def test_usage_errors(synth, tmp_path, capsys):
    assert cli(capsys, "run", synth, "--model", "gpt", "-o", tmp_path / "a.jsonl")[0] == 2
    assert cli(capsys, "run", synth, "--model", "oracle", "-o", tmp_path / "a.csv")[0] == 2
    assert cli(capsys, "generate", tmp_path / "x", "--pairs", 13)[0] == 2
    assert cli(capsys, "run", synth, "--model", "oracle", "--shard", "5/3", "-o", tmp_path / "b.jsonl")[0] == 2


def test_make_synth_schema_and_determinism(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    js(capsys, "generate", a, "--pairs", 6, "--size", 64)
    js(capsys, "generate", b, "--pairs", 6, "--size", 64)
    recs = json.loads((a / "annotations.json").read_text())
    assert len(recs) == 12 and set(recs[0]) >= {"image", "question", "choices", "answer", "category", "type", "source"}
    assert all(r["answer"] in r["choices"] for r in recs)
    assert (a / "annotations.json").read_bytes() == (b / "annotations.json").read_bytes()
    assert all((a / r["image"]).read_bytes() == (b / r["image"]).read_bytes() for r in recs)
    assert (a / "manifest.json").exists() and not (tmp_path / "a.partial").exists()


def test_effnet_scorer_knows_the_photos():
    from icmlkit.lib.mvi_bench.models import EffnetScorer, Request
    from icmlkit.lib.mvi_bench.protocol import build_prompt
    from icmlkit.lib.mvi_bench.synth import PHOTOS, _photo, _png

    from PIL import Image

    m = EffnetScorer()
    for label, want in (("cat", "A"), ("cup", "B")):
        img = _png(Image.fromarray(_photo(PHOTOS[label][0])))
        opts = ["a cat", "a coffee cup", "a rocket", "a palace"]
        assert m.answer(Request("k", img, "image/png", build_prompt("What?", opts), opts, "")) == want


@pytest.mark.slow
def test_demo_runs(tmp_path):
    out = tmp_path / "demo"
    r = run_tool(TOOL, "demo", "--outdir", out, "--pairs", 12, "--json", "--device", "cpu",
                 env={"ICMLKIT_SHARED_DATA": str(tmp_path / "none")})
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["http_equals_local"] is True and s["models"]["oracle"]["mvi_sensitivity"] == 0.0
    assert (out / "tables.md").exists() and (out / "manifest.json").exists()


def test_help_and_bad_flag_through_the_executable():
    r = run_tool(TOOL, "--help")
    assert r.returncode == 0 and "Example" in r.stdout
    assert run_tool(TOOL, "score", "--no-such-flag").returncode == 2


# ----------------------------------------------------------------------------------- fuzz

JSON_KINDS = DEFAULT_KINDS + ("truncated_json", "truncated_jsonl", "wrong_csv")


def _records(base):
    p = base / "good.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in fixture_records()))
    return {"good": p}


FUZZ = [
    FuzzCase("run", ["run", "{bad}", "--model", "oracle", "-o", "{out}/p.jsonl"], suffix=".json", kinds=JSON_KINDS),
    FuzzCase("run", ["run", "{bad}", "--model", "oracle", "-o", "{out}/p.jsonl"], suffix=".parquet",
             kinds=DEFAULT_KINDS + ("garbage_npz", "wrong_csv"), label="parquet"),
    FuzzCase("run", ["run", "{bad}", "--model", "oracle", "-o", "{out}/p.jsonl"], suffix=".tsv",
             kinds=DEFAULT_KINDS + ("wrong_csv", "nan_csv"), label="film-tsv"),
    FuzzCase("score", ["score", "{bad}", "-o", "{out}/t.csv"], suffix=".jsonl", kinds=JSON_KINDS + ("nan_csv",)),
    FuzzCase("score", ["score", "{good}", "{bad}", "-o", "{out}/t.md"], suffix=".jsonl", kinds=JSON_KINDS,
             setup=_records, label="second-file"),
    FuzzCase("export-vlmeval", ["export-vlmeval", "{bad}", "-o", "{out}/x.tsv"], suffix=".json", kinds=JSON_KINDS),
    FuzzCase("import-vlmeval", ["import-vlmeval", "{bad}", "-o", "{out}/r.jsonl"], suffix=".tsv",
             kinds=DEFAULT_KINDS + ("wrong_csv", "nan_csv", "truncated_json")),
    FuzzCase("import-vlmeval", ["import-vlmeval", "{bad}", "-o", "{out}/r.jsonl"], suffix=".xlsx",
             kinds=DEFAULT_KINDS + ("garbage_npz",), label="xlsx"),
]


@pytest.mark.parametrize("case", FUZZ, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def test_broken_image_inside_valid_annotations_leaves_no_output(synth, tmp_path, capsys):
    d = copy_synth(synth, tmp_path)
    (d / "images" / "occlusion_001_misleading.png").write_bytes(b"")
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = cli(capsys, "export-vlmeval", d, "-o", out / "x.tsv")
    assert code == 1 and "occlusion_001_misleading" in err and not os.listdir(out)
