"""The tool as the unit: every registry is generated from the manifests (lib/<module>/tool.toml),
one name per tool, milestones that follow from evidence, and the import rules between packages."""
from __future__ import annotations

import ast
import re

import pytest

from conftest import REPO
from icmlkit.lib.core import registry
from icmlkit.lib.core.errors import InputError
from icmlkit.lib.core.tools import MILESTONES, read_manifest, tools

TOOLS = tools()
METHOD_PACKAGES = {t.module for t in TOOLS}


def test_every_generated_registry_equals_its_manifests():
    """setup.cfg's scripts/extras, the Makefile's EXTRAS and the README table: `make registry` is a no-op."""
    assert registry.regenerate(REPO) == [], "generated parts are stale: run `make registry`"


def test_setup_cfg_scripts_are_exactly_the_manifests():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    scripts = dict((s.strip() for s in line.split("=", 1)) for line in lines)
    assert scripts.pop("icmlkit") == "icmlkit.cli.icmlkit:main"
    assert scripts == {t.name: t.entry_point for t in TOOLS}


@pytest.mark.parametrize("t", TOOLS, ids=lambda t: t.name)
def test_one_name_per_tool(t):
    """Executable fed-stream -> module fed_stream in cli/, lib/, bench/, tests/; docs/fed-stream.md."""
    for path in (f"cli/{t.module}.py", f"lib/{t.module}/__init__.py", f"bench/{t.module}.py",
                 f"tests/test_{t.module}.py", f"docs/{t.name}.md"):
        assert (REPO / path).is_file(), f"{t.name}: no {path}"
    for folder in t.data:
        assert (REPO / folder).is_dir(), f"{t.name}: data folder {folder} is missing"


def test_every_results_file_is_named_after_its_tool():
    for results in (REPO / "bench" / "results").iterdir():
        assert any(results.name.startswith(t.module) for t in TOOLS), f"bench/results/{results.name}"


@pytest.mark.parametrize("t", TOOLS, ids=lambda t: t.name)
def test_docs_page_has_the_fixed_headings(t):
    """docs/<tool>.md: What it does, Subcommands, Formats, JSON keys, Reconstructed, Benchmark (its
    targets table generated between markers), Gaps, Paper scale -- in that order."""
    text = (REPO / "docs" / f"{t.name}.md").read_text()
    found = [h for h in re.findall(r"^## (.+?)\s*$", text, re.M) if h in registry.DOC_HEADINGS]
    assert found == list(registry.DOC_HEADINGS), f"docs/{t.name}.md headings: {found}"
    assert registry.BENCH_BEGIN in text and registry.BENCH_END in text


def test_readme_rows_fit_a_screen():
    text = (REPO / "README.md").read_text()
    block = text.split(registry.README_BEGIN, 1)[1].split(registry.README_END, 1)[0]
    rows = [r for r in block.strip().splitlines()[2:]]
    assert len(rows) == len(TOOLS)
    for row in rows:
        plain = re.sub(r"\]\([^)]*\)", "]", row)  # a link's target is not a word a reader reads
        words = [w for w in re.split(r"[\s|]+", plain) if w.strip("[]`")]
        assert len(words) <= 25, f"{len(words)} words: {row}"


@pytest.mark.parametrize("t", TOOLS, ids=lambda t: t.name)
def test_milestone_follows_from_evidence(t):
    """The manifest's milestone is exactly what the parity test and the results' targets support."""
    assert t.claimed == registry.evidence_milestone(t, REPO)
    got = registry.targets(t, REPO)
    for name in (*t.reproduces, *t.beats_baseline):
        assert name in got, f"{t.name}: milestone evidence names target {name!r}, absent from its results"


def test_milestone_ladder_from_evidence(tmp_path):
    """A synthetic repository: no parity test -> runs; parity -> faithful; targets met -> higher."""
    import json
    from dataclasses import replace

    t = replace(TOOLS[0], reproduces=("a",), beats_baseline=("b",))
    (tmp_path / "tests").mkdir()
    (tmp_path / "bench" / "results").mkdir(parents=True)
    assert registry.evidence_milestone(t, tmp_path) == "runs"
    (tmp_path / "tests" / f"test_parity_{t.module}.py").write_text("")
    assert registry.evidence_milestone(t, tmp_path) == "faithful"
    res = tmp_path / "bench" / "results" / f"{t.module}.json"
    res.write_text(json.dumps({"targets": {"a": {"met": True}, "b": {"met": False}}}))
    assert registry.evidence_milestone(t, tmp_path) == "reproduces"
    res.write_text(json.dumps({"targets": {"a": {"met": True}, "b": {"met": True}}}))
    assert registry.evidence_milestone(t, tmp_path) == MILESTONES[-1]


def test_a_bad_manifest_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / "fed_stream"
    folder.mkdir()
    (folder / "tool.toml").write_text('name = "fed-stream"\nmethod = "m"\npaper = "p"\nlink = "l"\n'
                                      'purpose = "' + "word " * 16 + '"\n')
    with pytest.raises(InputError, match="tool.toml: 'purpose' has more than 15 words"):
        read_manifest(folder / "tool.toml")
    (folder / "tool.toml").write_text('name = "other-tool"\n')
    with pytest.raises(InputError, match="'method' must be a non-empty string"):
        read_manifest(folder / "tool.toml")


def _imports(path):
    """Absolute module names imported by a lib file (relative imports resolved)."""
    pkg = ["icmlkit", "lib", *path.relative_to(REPO / "lib").parent.parts]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                yield ".".join(base + ([node.module] if node.module else []))
            else:
                yield node.module or ""


def test_import_rules():
    """No method package imports another method package; lib never imports cli or bench."""
    bad = []
    for path in sorted((REPO / "lib").rglob("*.py")):
        parts = path.relative_to(REPO / "lib").parts
        own = parts[0] if len(parts) > 1 else None
        for name in _imports(path):
            if name.startswith(("icmlkit.cli", "bench", "_common")) or name in ("cli", "lib"):
                bad.append(f"{path.relative_to(REPO)} imports {name}")
            m = re.match(r"icmlkit\.lib\.(\w+)", name)
            if m and m.group(1) in METHOD_PACKAGES and own in METHOD_PACKAGES and m.group(1) != own:
                bad.append(f"{path.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(bad)
