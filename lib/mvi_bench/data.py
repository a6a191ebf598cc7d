"""Readers of MVI-Bench-style data: items, validation and pairs.

Three layouts are read (``read_dataset(path, fmt="auto")``):

- **official**: ``annotations.json`` (a JSON array of records, or ``{"annotations": [...]}``) with
  image paths relative to the file's folder. Record fields: ``image``, ``question``, ``choices``
  (a list, or a JSON string), ``answer`` (the gold option's text), ``category`` (official key),
  ``type`` (normal | misleading; ``adversarial`` is read as misleading), ``source``; optional
  ``id`` and ``pair_id``. DATA may name the file or a folder holding it.
- **parquet**: the Hugging Face layout (a ``.parquet`` file, or a folder of them): the same columns,
  ``image`` as a ``{bytes, path}`` struct or raw bytes, ``choices`` as a JSON string.
- **film**: the FILM folder (``FILM_VQA.tsv`` + ``FILM_images/``; Shinozaki et al., CogSci 2025,
  CC BY-SA 4.0). Each illusion image and its control become one misleading / normal pair of the
  ``illusion`` category, asked FILM's *actual* question (answers from FILM_VQA.tsv); FILM's own
  illusion category (color, length, size, shape, angle) is kept as ``subcategory`` and genuine /
  fake illusions as ``source`` (``film-genuine`` / ``film-fake``).

Pairing **[reconstructed]** (the official schema names no pair key): an explicit ``pair_id``
wins; otherwise the ``id`` with a normal/misleading/adversarial token removed; otherwise the image
path with such a token removed; always within one category. Every pair must hold exactly one
normal and one misleading item.

Every problem is an :class:`InputError` naming the file, the item id and the field.
"""
from __future__ import annotations

import csv
import io
import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from icmlkit.lib.core.errors import InputError, require_module
from icmlkit.lib.mvi_bench.config import CATEGORIES, CATEGORY_NAMES, LEVEL_OF, LETTERS, TYPE_ALIASES

_NAME_TO_KEY = {**{c: c for c in CATEGORIES}, **{v.lower(): k for k, v in CATEGORY_NAMES.items()},
                "visual illusion": "illusion", "mirror reflection": "mirror", "occlusion": "occlusion"}
_PAIR_TOKEN = re.compile(r"(?i)(?:^|(?<=[_\-./\s]))(normal|misleading|adversarial|mislead)(?=$|[_\-./\s])")


@dataclass
class Item:
    """One multiple-choice instance (one image)."""

    id: str
    pair_id: str
    question: str
    choices: list[str]
    answer: str
    category: str
    type: str  # normal | misleading
    source: str = ""
    subcategory: str = ""
    image_path: str | None = None
    image_bytes: bytes | None = field(default=None, repr=False)

    @property
    def level(self) -> str:
        return LEVEL_OF[self.category]

    def image(self) -> bytes:
        """The encoded image (PNG/JPEG bytes)."""
        if self.image_bytes is not None:
            return self.image_bytes
        try:
            return Path(self.image_path).read_bytes()
        except OSError as exc:
            raise InputError(f"item {self.id}: field image: cannot read ({exc.strerror})", self.image_path) from None


@dataclass
class Dataset:
    """Items in a deterministic order (pairs sorted by pair id, normal first), and where they came from."""

    items: list[Item]
    path: str
    format: str

    @property
    def pairs(self) -> list[tuple[Item, Item]]:
        out = []
        for i in range(0, len(self.items), 2):
            out.append((self.items[i], self.items[i + 1]))
        return out

    def summary(self) -> dict:
        cats: dict[str, int] = {}
        for n, _ in self.pairs:
            cats[n.category] = cats.get(n.category, 0) + 1
        return {"n_items": len(self.items), "n_pairs": len(self.items) // 2, "format": self.format,
                "per_category": cats}


# ------------------------------------------------------------------------------------ validation


def _err(file: str, item: str, fld: str, msg: str) -> InputError:
    return InputError(f"item {item}: field {fld}: {msg}", file)


def _text(rec: dict, key: str, file: str, item: str, required: bool = True) -> str:
    v = rec.get(key)
    if v is None or (isinstance(v, float) and v != v):
        if required:
            raise _err(file, item, key, "missing")
        return ""
    if not isinstance(v, (str, int, float)) or isinstance(v, bool):
        raise _err(file, item, key, f"expected text, found {type(v).__name__}")
    s = str(v).strip()
    if required and not s:
        raise _err(file, item, key, "empty")
    return s


def _choices(value, file: str, item: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _err(file, item, "choices", "not a JSON list of option texts") from None
    if hasattr(value, "tolist"):  # numpy / pyarrow arrays
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise _err(file, item, "choices", "expected a list of option texts")
    out = []
    for c in value:
        if not isinstance(c, (str, int, float)) or isinstance(c, bool):
            raise _err(file, item, "choices", "every option must be text")
        out.append(str(c).strip())
    if not 2 <= len(out) <= len(LETTERS):
        raise _err(file, item, "choices", f"expected 2 to {len(LETTERS)} options, found {len(out)}")
    if len(set(out)) != len(out) or any(not c for c in out):
        raise _err(file, item, "choices", "options must be distinct and non-empty")
    return out


def _category(value: str, file: str, item: str) -> str:
    key = _NAME_TO_KEY.get(value.strip().lower())
    if key is None:
        raise _err(file, item, "category", f"unknown category {value!r}; expected one of {', '.join(CATEGORIES)}")
    return key


def _type(value: str, file: str, item: str) -> str:
    t = TYPE_ALIASES.get(value.strip().lower())
    if t is None:
        raise _err(file, item, "type", f"unknown type {value!r}; expected normal or misleading (adversarial)")
    return t


def _pair_key(rec: dict, item_id: str, image: str) -> str:
    if rec.get("pair_id") not in (None, ""):
        return str(rec["pair_id"])
    base = str(rec["id"]) if rec.get("id") not in (None, "") else image
    stem = _PAIR_TOKEN.sub("", base)
    return re.sub(r"[_\-.\s]+$", "", re.sub(r"[_\-.\s]{2,}", "_", stem)) or base


def make_item(rec: dict, index: int, file: str, image_path: str | None = None, image_bytes: bytes | None = None,
              image_name: str = "") -> Item:
    """Validate one record (official field names) into an :class:`Item`."""
    item_id = str(rec["id"]) if rec.get("id") not in (None, "") else (image_name or f"#{index}")
    question = _text(rec, "question", file, item_id)
    choices = _choices(rec.get("choices"), file, item_id)
    answer = _text(rec, "answer", file, item_id)
    if answer not in choices:
        raise _err(file, item_id, "answer", f"{answer!r} is not among the choices")
    category = _category(_text(rec, "category", file, item_id), file, item_id)
    typ = _type(_text(rec, "type", file, item_id), file, item_id)
    pair = f"{category}/{_pair_key(rec, item_id, image_name)}"
    return Item(item_id, pair, question, choices, answer, category, typ, _text(rec, "source", file, item_id, False),
                _text(rec, "subcategory", file, item_id, False), image_path, image_bytes)


def check_image(data: bytes, file: str, item_id: str) -> None:
    """The bytes must decode as an image (PIL ``verify``)."""
    PIL = require_module("PIL.Image", "mvi-bench", "pillow")
    try:
        with PIL.open(io.BytesIO(data)) as im:
            im.verify()
    except Exception as exc:  # noqa: BLE001 - any decoder error is bad input
        raise _err(file, item_id, "image", f"not a readable image ({type(exc).__name__})") from None


def pair_items(items: list[Item], file: str, pairing: str = "key") -> list[Item]:
    """Join items into pairs; returns them pair by pair (sorted by pair id), normal first.

    ``pairing="order"``: the k-th normal and the k-th misleading item of a category (file order)
    form pair ``<category>/<k>``, whatever their ids say [reconstructed]."""
    if pairing == "order":
        count: dict[tuple[str, str], int] = {}
        for it in items:
            k = count.get((it.category, it.type), 0)
            count[(it.category, it.type)] = k + 1
            it.pair_id = f"{it.category}/{k:05d}"
    seen: dict[str, Item] = {}
    groups: dict[str, dict[str, Item]] = {}
    for it in items:
        if it.id in seen:
            raise _err(file, it.id, "id", "duplicate item id")
        seen[it.id] = it
        slot = groups.setdefault(it.pair_id, {})
        if it.type in slot:
            raise _err(file, it.id, "type", f"pair {it.pair_id} has two {it.type} items ({slot[it.type].id} and {it.id})")
        slot[it.type] = it
    out = []
    for pid in sorted(groups):
        g = groups[pid]
        if len(g) != 2:
            lone = next(iter(g.values()))
            missing = "misleading" if "normal" in g else "normal"
            raise _err(file, lone.id, "type", f"unpaired item: pair {pid} has no {missing} item"
                       + (" (try --pairing order)" if pairing == "key" else ""))
        if len(g["normal"].choices) != len(g["misleading"].choices):
            raise _err(file, g["misleading"].id, "choices", f"pair {pid}: the two items have different numbers of options")
        out.extend([g["normal"], g["misleading"]])
    if not out:
        raise InputError("no items", file)
    return out


# ---------------------------------------------------------------------------------------- readers


def read_official(path: str | Path, check_images: bool = True, pairing: str = "key") -> Dataset:
    """``annotations.json`` (or a folder holding it) with images relative to its folder."""
    from icmlkit.lib.core.io import load_json

    p = Path(path)
    if p.is_dir():
        p = p / "annotations.json"
        if not p.is_file():
            raise InputError("no annotations.json in this folder (and no .parquet or FILM_VQA.tsv)", str(path))
    data = load_json(p, expect=(list, dict), what="annotations JSON")
    if isinstance(data, dict):
        data = data.get("annotations", data.get("data"))
        if not isinstance(data, list):
            raise InputError("expected a JSON array of records (or {\"annotations\": [...]})", str(p))
    root = p.parent
    items = []
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise InputError(f"record {i}: expected an object, found {type(rec).__name__}", str(p))
        name = _text(rec, "image", str(p), str(rec.get("id", f"#{i}")))
        img = (root / name).resolve()
        item = make_item(rec, i, str(p), image_path=str(img), image_name=name)
        if not img.is_file():
            raise _err(str(p), item.id, "image", f"no such image file {name}")
        if check_images:
            check_image(item.image(), str(p), item.id)
        items.append(item)
    return Dataset(pair_items(items, str(p), pairing), str(p), "official")


def read_parquet(path: str | Path, check_images: bool = True, pairing: str = "key") -> Dataset:
    """The Hugging Face parquet layout (one file or a folder of ``*.parquet``)."""
    require_module("pyarrow", "mvi-bench", "pyarrow")
    import pyarrow.parquet as pq

    p = Path(path)
    files = sorted(p.rglob("*.parquet")) if p.is_dir() else [p]
    if not files:
        raise InputError("no .parquet files in this folder", str(path))
    items = []
    for f in files:
        if not f.is_file():
            raise InputError("no such file", str(f))
        try:
            rows = pq.read_table(f).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds on a broken file
            raise InputError(f"not a readable parquet file ({type(exc).__name__}: {str(exc)[:120]})", str(f)) from None
        for i, rec in enumerate(rows):
            rid = str(rec.get("id", f"#{i}"))
            img = rec.get("image")
            name = ""
            if isinstance(img, dict):
                name = str(img.get("path") or "")
                img = img.get("bytes")
            if not isinstance(img, (bytes, bytearray)) or not img:
                raise _err(str(f), rid, "image", "no image bytes")
            item = make_item(rec, i, str(f), image_bytes=bytes(img), image_name=name or rid)
            if check_images:
                check_image(item.image_bytes, str(f), item.id)
            items.append(item)
    return Dataset(pair_items(items, str(p), pairing), str(p), "parquet")


FILM_PAIRS = (("genuine", "01_genuine_illusion_original", "02_genuine_illusion_control"),
              ("fake", "03_fake_illusion_original", "04_fake_illusion_control"))


def _film_key(name: str) -> str:
    # the TSV and the folder spell a few names differently (Jastrow_A vs Jastrow-A; Unicode forms)
    return unicodedata.normalize("NFC", name).replace("_", "-").lower()


def _film_options(raw: str, file: str, line: int, fld: str) -> list[str]:
    opts = next(csv.reader([raw], skipinitialspace=True), [])
    opts = [o.strip() for o in opts if o.strip()]
    if len(opts) < 2:
        raise InputError(f"field {fld}: expected a list of quoted options", file, line)
    return opts


def read_film(path: str | Path, check_images: bool = True, pairing: str = "key") -> Dataset:
    """The FILM folder: illusion/control pairs -> misleading/normal pairs (category illusion)."""
    from icmlkit.lib.core.io import open_text

    root = Path(path)
    tsv = root / "FILM_VQA.tsv" if root.is_dir() else root
    root = tsv.parent
    images = root / "FILM_images"
    if not images.is_dir():
        raise InputError("no FILM_images folder beside FILM_VQA.tsv", str(root))
    on_disk = {}
    for sub in sorted(images.iterdir()):
        if sub.is_dir():
            for f in sorted(sub.iterdir()):
                on_disk[(sub.name, _film_key(f.name))] = f
    with open_text(tsv) as fh:
        lines = fh.read().splitlines()
    if not lines:
        raise InputError("empty file", str(tsv))
    header = lines[0].split("\t")
    need = ["id", "file_name", "question (actual)", "options (actual)", "answer (actual)", "illusion category"]
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(f"missing columns {missing} (a FILM_VQA.tsv was expected)", str(tsv), 1)
    col = {c: header.index(c) for c in header}
    rows = {}
    for ln, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(header):
            raise InputError(f"expected {len(header)} tab-separated fields, found {len(cells)}", str(tsv), ln)
        rows[_film_key(cells[col["file_name"]])] = (ln, cells)
    items = []
    for variant, d_ill, d_ctl in FILM_PAIRS:
        for sub, typ in ((d_ill, "misleading"), (d_ctl, "normal")):
            suffix = f"{variant}-illusion-{'original' if typ == 'misleading' else 'control'}.png"
            for (s, key), f in sorted(on_disk.items()):
                if s != sub or not key.endswith(suffix):
                    continue
                if key not in rows:
                    raise InputError(f"image {f.name} has no row in FILM_VQA.tsv", str(tsv))
                ln, cells = rows[key]
                stem = key[: -len(suffix)].rstrip("-")
                opts = _film_options(cells[col["options (actual)"]], str(tsv), ln, "options (actual)")
                ans = re.sub(r'^[\s"]+|[\s",]+$', "", cells[col["answer (actual)"]])  # one row ends in '",'
                rec = {"id": f"film{int(cells[col['id']]):03d}" if cells[col["id"]].strip().isdigit() else cells[col["id"]],
                       "question": cells[col["question (actual)"]].strip(), "choices": opts, "answer": ans,
                       "category": "illusion", "type": typ, "source": f"film-{variant}",
                       "subcategory": cells[col["illusion category"]].strip(), "pair_id": f"{stem}-{variant}"}
                try:
                    item = make_item(rec, ln, f"{tsv}, line {ln}", image_path=str(f), image_name=f.name)
                except InputError as exc:
                    raise exc from None
                if check_images:
                    check_image(item.image(), str(tsv), item.id)
                items.append(item)
    return Dataset(pair_items(items, str(tsv)), str(tsv), "film")


def detect_format(path: str | Path) -> str:
    p = Path(path)
    if not p.exists():
        raise InputError("no such file or folder", str(path))
    if p.is_dir():
        if (p / "FILM_VQA.tsv").is_file():
            return "film"
        if (p / "annotations.json").is_file():
            return "official"
        if any(p.rglob("*.parquet")):
            return "parquet"
        raise InputError("no annotations.json, .parquet files or FILM_VQA.tsv in this folder", str(path))
    name = p.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".tsv"):
        return "film"
    if name.endswith((".json", ".json.gz")):
        return "official"
    raise InputError("expected annotations.json, a .parquet file, FILM_VQA.tsv or a folder holding one", str(path))


def read_dataset(path: str | Path, fmt: str = "auto", check_images: bool = True, pairing: str = "key") -> Dataset:
    """Read and validate ``path`` in layout ``fmt`` (auto: by name)."""
    if str(path) == "-":
        raise InputError("a data set cannot be read from stdin (images live beside it): name the file", "-")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if not Path(path).exists():
        raise InputError("no such file or folder", str(path))
    reader = {"official": read_official, "parquet": read_parquet, "film": read_film}[fmt]
    return reader(path, check_images=check_images, pairing=pairing if fmt != "film" else "key")
