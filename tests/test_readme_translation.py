"""README.ko.md translates README.md section by section, and says so: under each Korean heading a
stamp ``<!-- en: "## Speed" sha256: ... -->`` names the English section it translates and the hash of
that section as translated (``machinery.translations.readme_drift``). A section changed or added in
English and not in Korean fails here, as a changed English cell fails ``test_translations.py``.

The drift check is shown to bite on a temporary copy: one English section edited alone fails it
(naming that section only), restamping after the update passes it again. The Korean glossary table
is generated (``glossary --readme --lang ko``) and must equal the glossary; the Korean README must
render as written (no stray ``**``, the check of ``test_markdown_renders.py``) and keep what the
course site reads from it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from course_utils.lesson_aids import glossary
from course_utils.machinery import translations as tr
from course_utils.machinery.paths import README, README_KO
from test_markdown_renders import render_problems

ENGLISH = README.read_text(encoding="utf-8")
KOREAN = README_KO.read_text(encoding="utf-8")


def test_every_english_section_is_translated_and_stamped_with_its_current_hash():
    problems = tr.readme_drift(ENGLISH, KOREAN)
    assert not problems, "README.ko.md is behind README.md:\n" + "\n".join(problems)


def test_the_sections_a_learner_uses_are_there():
    sections = tr.readme_sections(ENGLISH)
    for heading in ("## Two commands", "## The lessons", "## The whole pipeline, measured", "## Speed",
                    "## Models, offline and online", "## Glossary (English ↔ Korean)", "## Troubleshooting"):
        assert heading in sections, heading
    assert any(h.startswith("### When does PPO beat SFT?") for h in sections)
    stamped = {m.group("heading") for m in tr.README_STAMP.finditer(KOREAN)}
    assert stamped == set(sections)


def test_the_lessons_table_lists_all_twelve_weeks_and_says_which_are_korean():
    table = [line for line in tr.readme_sections(KOREAN)["## 강의 구성"].splitlines() if line.startswith("| ")]
    weeks = [line.split("|")[1].strip() for line in table[1:]]
    assert weeks == ["1", "2", "3", "4", "5", "6a", "6b", "7", "8", "9", "10", "11"]
    korean = committed_korean_lessons()
    for line in table[1:]:
        stem = line.split("`")[1]
        assert ("있음" in line.split("|")[5]) == (stem in korean), (
            f"README.ko.md's lessons table says {line.split('|')[5].strip()!r} for {stem}, but notebooks/ko/ "
            f"{'has' if stem in korean else 'has no'} {stem}.ipynb: update the 한국어판 column and the sentences "
            "about which weeks are Korean (그 절의 첫 문단, 한국어판에 대하여), then restamp if needed")


def committed_korean_lessons() -> set[str]:
    """The Korean lessons a clone gets: ``git ls-files`` (a lesson being translated in the working tree
    is not there yet), or the folder's files where there is no git."""
    folder = README.parent / "notebooks" / "ko"
    try:
        listed = subprocess.run(["git", "ls-files", "--", "week*.ipynb"], cwd=folder, capture_output=True,
                                text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [p.name for p in folder.glob("week*.ipynb")]
    return {Path(name).stem for name in listed}


def test_a_changed_english_section_fails_until_its_translation_is_restamped(tmp_path):
    english, korean = tmp_path / "README.md", tmp_path / "README.ko.md"
    english.write_text(ENGLISH, encoding="utf-8")
    korean.write_text(KOREAN, encoding="utf-8")
    assert tr.readme_drift(english.read_text(), korean.read_text()) == []  # the copy is in step
    speed = tr.readme_sections(ENGLISH)["## Speed"]
    english.write_text(ENGLISH.replace(speed, speed.replace("at least 5% faster", "at least 7% faster"), 1))
    problems = tr.readme_drift(english.read_text(), korean.read_text())
    assert len(problems) == 1 and "'## Speed' changed in README.md since it was translated" in problems[0]
    assert "translate --stamp README '## Speed'" in problems[0]
    text, stamped = tr.stamp_readme(english.read_text(), korean.read_text(), ["## Speed"])
    assert stamped == ["## Speed"] and tr.readme_drift(english.read_text(), text) == []
    assert text.replace(tr.readme_hashes(english.read_text())["## Speed"], "") == \
        KOREAN.replace(tr.readme_hashes(ENGLISH)["## Speed"], "")  # only that stamp changed


def test_a_new_english_section_or_a_stale_stamp_is_named():
    added = ENGLISH.replace("\n## Layout\n", "\n## Something new\n\nText.\n\n## Layout\n", 1)
    problems = tr.readme_drift(added, KOREAN)
    assert len(problems) == 1 and "'## Something new' has no translation" in problems[0]
    renamed = ENGLISH.replace("\n## Layout\n", "\n## Folders\n", 1)
    problems = tr.readme_drift(renamed, KOREAN)
    assert any("'## Layout', which is not a heading of README.md" in p for p in problems)
    assert any("'## Folders' has no translation" in p for p in problems)
    unstamped = tr.README_STAMP.sub(lambda m: m.group(0) if m.group("heading") != "## Speed"
                                    else '<!-- en: "## Speed" sha256: -->', KOREAN)
    assert any("'## Speed' is translated but not stamped" in p for p in tr.readme_drift(ENGLISH, unstamped))
    text, stamped = tr.stamp_readme(ENGLISH, unstamped)  # no heading named: the empty stamps
    assert stamped == ["## Speed"] and text == KOREAN


def test_the_glossary_block_is_left_out_of_the_hash_and_checked_on_its_own():
    regenerated = ENGLISH.replace("| **policy** | 정책 |", "| **policy** | 정책(바뀜) |", 1)
    assert regenerated != ENGLISH and tr.readme_drift(regenerated, KOREAN) == []
    assert glossary.readme_with_glossary(KOREAN, "ko") == KOREAN, \
        "run: python -m course_utils glossary --readme --lang ko"
    assert glossary.MEANINGS_KO["policy"] in KOREAN
    with pytest.raises(ValueError, match="no glossary block"):
        glossary.readme_with_glossary(ENGLISH, "ko")


def test_headings_inside_code_are_not_sections_and_a_repeated_heading_is_refused():
    text = "# Title\n\n```bash\n# a comment, not a heading\n```\n\n## A\n\nx\n"
    assert list(tr.readme_sections(text)) == ["# Title", "## A"]
    with pytest.raises(ValueError, match="occurs twice"):
        tr.readme_sections(text + "\n## A\n")


def test_the_korean_readme_renders_as_written():
    problems = render_problems(KOREAN)
    assert not problems, "\n".join(problems)


def test_the_course_site_still_reads_the_korean_readme():
    from course_utils.machinery import site

    page = site.korean_home_page([])
    text = "".join(cell["source"] for cell in page["cells"])
    assert '<a id="troubleshooting"></a>' in text and "## 두 가지 명령" in text
