"""Generate every registry of the tools from their manifests (:mod:`icmlkit.lib.core.tools`).

Each ``render_*`` takes the file's current text and returns it with the generated part replaced, so
``icmlkit registry --write`` (``make registry``) rewrites the files and ``tests/test_registry.py``
checks that rendering the committed files changes nothing. The README's milestone and "targets met"
columns come from evidence: the tool's parity test and ``bench/results/<module>.json``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import InputError
from .tools import MILESTONES, Tool, shared_extras, tools

README_BEGIN = "<!-- tools:begin (generated from lib/*/tool.toml by `make registry`; do not edit) -->"
README_END = "<!-- tools:end -->"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def extras() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(extras that `make install` installs, extras it leaves out), each name -> requirements."""
    installed, optional = dict(shared_extras()), dict(shared_extras("optional"))
    for t in tools():
        if t.extra:
            installed[t.extra] = t.dependencies
        optional.update(t.optional_extras)
    return installed, optional


def _replace_section(text: str, section: str, body: str) -> str:
    pattern = re.compile(rf"^\[{re.escape(section)}\]\n.*?(?=^\[|\Z)", re.M | re.S)
    block = f"[{section}]\n{body}\n"
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    return text.rstrip("\n") + "\n\n" + block


def render_setup_cfg(text: str) -> str:
    """setup.cfg with generated extras, console scripts and package data (the manifests)."""
    installed, optional = extras()
    lines = []
    for name, reqs in {**installed, **optional}.items():
        lines.append(f"{name} =")
        lines += [f"    {r}" for r in reqs]
    text = _replace_section(text, "options.extras_require", "\n".join(lines) + "\n")
    scripts = ["console_scripts =", "    icmlkit = icmlkit.cli.icmlkit:main"]
    scripts += [f"    {t.name} = {t.entry_point}" for t in tools()]
    text = _replace_section(text, "options.entry_points", "\n".join(scripts) + "\n")
    return _replace_section(text, "options.package_data", "icmlkit.lib = */tool.toml, core/extras.toml\n")


def render_makefile(text: str) -> str:
    installed, optional = extras()
    text = re.sub(r"^EXTRAS \?=.*$", lambda _: "EXTRAS ?= " + ",".join(installed), text, count=1, flags=re.M)
    return re.sub(r"^OPTIONAL_EXTRAS :=.*$", lambda _: "OPTIONAL_EXTRAS := " + ",".join(optional), text,
                  count=1, flags=re.M)


def targets(t: Tool, root: Path | None = None) -> dict[str, dict]:
    """The ``targets`` of ``bench/results/<module>.json`` ({} when there is no results file)."""
    path = (root or repo_root()) / "bench" / "results" / f"{t.module}.json"
    if not path.is_file():
        return {}
    got = json.loads(path.read_text()).get("targets") or {}
    return {k: v for k, v in got.items() if isinstance(v, dict) and "met" in v}


def is_reported(v: dict) -> bool:
    """A target reported without a threshold (``None`` or "... (reported)"): shown, never counted as met."""
    th = v.get("threshold")
    return th is None or "reported" in str(th)


def met_count(got: dict[str, dict]) -> tuple[int, int, int]:
    """(met, judged, reported): targets met among those with a threshold, and the reported-only ones."""
    judged = [v for v in got.values() if not is_reported(v)]
    return sum(1 for v in judged if v["met"] is True), len(judged), len(got) - len(judged)


def evidence_milestone(t: Tool, root: Path | None = None) -> str:
    """The highest milestone the evidence supports, each level requiring the one before:
    ``runs`` (a demo runs on real or generated data), ``faithful`` (tests/test_parity_<module>.py,
    run by `make test`), ``reproduces`` (every target the manifest names as the paper's headline
    met), ``beats-baseline`` (every target it names against the strongest simple baseline met)."""
    root = root or repo_root()
    got = targets(t, root)

    def all_met(names):
        return bool(names) and all(got.get(n, {}).get("met") is True for n in names)

    level = "runs"
    if (root / "tests" / f"test_parity_{t.module}.py").is_file():
        level = "faithful"
        if all_met(t.reproduces):
            level = "reproduces"
            if all_met(t.beats_baseline):
                level = "beats-baseline"
    return level


def readme_row(t: Tool, root: Path | None = None) -> str:
    got = targets(t, root)
    met, judged, _ = met_count(got)
    score = f"{met}/{judged}" if judged else "—"
    return (f"| `{t.name}` | [{t.method}]({t.link}) | {t.purpose} | {t.claimed} | {score} | "
            f"[docs/{t.name}.md](docs/{t.name}.md) |")


def render_readme(text: str, root: Path | None = None) -> str:
    """README.md with the generated tools table between its markers."""
    if README_BEGIN not in text or README_END not in text:
        raise InputError("README.md: no tools-table markers (<!-- tools:begin ... --> and <!-- tools:end -->)")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    rows = ["| tool | method | purpose | milestone | targets met | page |", "|---|---|---|---|---|---|"]
    rows += [readme_row(t, root) for t in tools()]
    return head + README_BEGIN + "\n" + "\n".join(rows) + "\n" + README_END + tail


BENCH_BEGIN = "<!-- bench:begin (generated from bench/results by `make registry`; do not edit) -->"
BENCH_END = "<!-- bench:end -->"
DOC_HEADINGS = ("What it does", "Subcommands", "Formats", "JSON keys", "Reconstructed", "Benchmark", "Gaps",
                "Paper scale")


def render_doc(t: Tool, text: str, root: Path | None = None) -> str:
    """docs/<tool>.md with its targets table (from bench/results/<module>.json) between its markers."""
    if BENCH_BEGIN not in text or BENCH_END not in text:
        return text
    root = root or repo_root()
    got = targets(t, root)
    rows = ["| target | value | threshold | met | note |", "|---|---|---|---|---|"]
    for name, v in got.items():
        note = str(v.get("note", "")).replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {_fmt(v.get('value'))} | {_fmt(v.get('threshold'))} | "
                    f"{'reported' if is_reported(v) else 'met' if v['met'] is True else 'missed'} | {note} |")
    met, judged, reported = met_count(got)
    body = (f"Targets: {met} of {judged} met" + (f" ({reported} more reported, without a threshold)" if reported
                                                  else "") + ". Every table and its "
            f"provenance (commit, date, command, seconds per part): "
            f"[bench/results/{t.module}.md](../bench/results/{t.module}.md); rerun with "
            f"`make bench TOOL={t.name}`.\n\n" + "\n".join(rows)) if got else \
        f"No results yet: `make bench TOOL={t.name}` writes bench/results/{t.module}.json."
    head, rest = text.split(BENCH_BEGIN, 1)
    _, tail = rest.split(BENCH_END, 1)
    return head + BENCH_BEGIN + "\n" + body + "\n" + BENCH_END + tail


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "—" if v is None else str(v).replace("|", "\\|")


RENDERERS = {"setup.cfg": render_setup_cfg, "Makefile": render_makefile, "README.md": render_readme}


def regenerate(root: Path | None = None, write: bool = False) -> list[str]:
    """The files whose generated parts are out of date (rewritten in place when ``write``)."""
    root = root or repo_root()
    stale = []
    renderers = {**RENDERERS, "README.md": lambda text: render_readme(text, root)}
    for t in tools():
        renderers[f"docs/{t.name}.md"] = lambda text, t=t: render_doc(t, text, root)
    for name, render in renderers.items():
        path = root / name
        old = path.read_text()
        new = render(old)
        if new != old:
            stale.append(name)
            if write:
                from .io import write_text

                write_text(path, new)
    return stale


__all__ = ["MILESTONES", "evidence_milestone", "extras", "readme_row", "regenerate", "render_makefile",
           "render_doc", "render_readme", "render_setup_cfg", "targets"]
