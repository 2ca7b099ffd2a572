"""The Korean lessons: translations merged into the English notebooks, and the drift check of CI.

- every translated cell still translates the English cell it records (names the notebook and cells);
- the drift check fails on a changed, a new or a removed English cell (on a copy in a temp folder);
- notebooks/ko/*.ipynb are exactly the merge (nobody edits them by hand);
- their code is the English code but for the quiz texts, ``lang="ko"`` on the quiz, exercise and
  glossary calls and ``order_key=`` the English question on the choice questions (so they show the
  English option order), their other outputs are the English ones;
- their glossary tables have the Korean header and Korean meanings;
- their quizzes and exercise checks answer back in Korean, headless, without English scaffolding.
"""

from __future__ import annotations

import ast
import html
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from course_utils.lesson_aids import glossary
from course_utils.lesson_aids import quiz as quiz_module
from course_utils.machinery import translations as tr

LESSONS = tr.lessons()
HANGUL = re.compile(r"[\uac00-\ud7a3]")


def lesson_id(lesson: tr.Lesson) -> str:
    return lesson.english.stem


def english_and_translations(lesson: tr.Lesson):
    return tr.read_english(lesson), tr.load_translations(lesson.translations_file)


def test_weeks_one_to_five_are_translated():
    assert [lesson_id(lesson) for lesson in LESSONS][:5] == [
        "week01_four_models", "week02_rollouts", "week03_advantage", "week04_ratio_clipping", "week05_kl_shaping"]


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_every_translation_matches_its_english_cell(lesson):
    """The CI drift check: an English cell changed since its translation, a cell without a
    translation, or a translation of a cell that is gone fails here, naming the notebook and cells."""
    problems = tr.drift(*english_and_translations(lesson)).lines()
    assert not problems, "the Korean translation is behind the English lesson:\n" + "\n".join(problems)


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_the_korean_notebook_is_the_merge(lesson):
    """notebooks/ko/ is generated: `python -m course_utils translate` writes it, nobody edits it."""
    expected = tr.notebook_text(tr.merge(*english_and_translations(lesson)))
    assert lesson.generated.is_file(), f"{lesson.generated} is missing: run `python -m course_utils translate`"
    assert lesson.generated.read_text(encoding="utf-8") == expected, (
        f"{lesson.generated} differs from the merge of {lesson.english.name} and {lesson.translations_file.name}: "
        "run `python -m course_utils translate` (edit the translations file, never the Korean notebook)")


def blank_strings(source: str) -> str:
    """The cell's code with every string literal replaced by one placeholder (and no ``lang=``); an
    ``order_key=`` keeps its text (written as one literal, however it is split over lines), and an
    ``answer=`` / ``answers=`` its labels (a translation never changes a key)."""
    class Blank(ast.NodeTransformer):
        def visit_Call(self, node):
            node.keywords = [k for k in node.keywords if k.arg != "lang"]
            return self.generic_visit(node)

        def visit_keyword(self, node):
            if node.arg == "order_key":
                return ast.keyword("order_key", ast.Constant(ast.unparse(node.value)))
            if node.arg in ("answer", "answers"):
                return node
            return self.generic_visit(node)

        def visit_Constant(self, node):
            return ast.Constant("S") if isinstance(node.value, str) else node

        def visit_JoinedStr(self, node):
            return ast.Constant("S")

    return ast.dump(Blank().visit(ast.parse(tr._parseable(source))))


def quiz_code_as_sanctioned(english: str, korean: str) -> bool:
    """The translated quiz cell ``korean`` is the English cell but for its texts, ``lang=`` and, on each
    choice question, ``order_key=`` exactly the English question (``tr.with_order_keys``)."""
    return blank_strings(korean) == blank_strings(tr.with_order_keys(english, english))


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_one_source_of_truth_for_code(lesson):
    """Same cells, same ids; code cells identical except the quiz texts, ``lang="ko"`` on the quiz,
    exercise and glossary calls and ``order_key`` (the English question) on the choice questions;
    outputs identical except the re-rendered quizzes, exercise messages and glossary tables."""
    english = nbformat.read(lesson.english, as_version=4)
    korean = nbformat.read(lesson.generated, as_version=4)
    assert [c.id for c in korean.cells] == [c.id for c in english.cells]
    for en, ko in zip(english.cells, korean.cells):
        assert en.cell_type == ko.cell_type
        if en.cell_type != "code":
            continue
        if tr.is_quiz_cell(en):
            assert quiz_code_as_sanctioned(en.source, ko.source), f"{lesson.name} cell {en.id}: code changed"
            assert len(ko.outputs) == len(en.outputs)
        elif tr.is_exercise_cell(en):
            assert ko.source == tr.with_language(en.source, "ko"), f"{lesson.name} cell {en.id}: only lang= may differ"
            assert [o.output_type for o in ko.outputs] == [o.output_type for o in en.outputs]
        elif tr.is_glossary_cell(en):
            assert ko.source == tr.with_language(en.source, "ko"), f"{lesson.name} cell {en.id}: only lang= may differ"
            assert ko.source != en.source and 'lang="ko")' in ko.source
            assert [o.output_type for o in ko.outputs] == [o.output_type for o in en.outputs]
            assert [sorted(o.get("data", {})) for o in ko.outputs] == [sorted(o.get("data", {})) for o in en.outputs]
        else:
            assert ko.source == en.source, f"{lesson.name} cell {en.id}: only quiz cells may differ"
            assert ko.outputs == en.outputs, f"{lesson.name} cell {en.id}: outputs are the English notebook's"


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_quiz_outputs_are_rendered_as_a_kernel_would(lesson):
    """The kernel-less rendering that makes the Korean quiz outputs gives, on the English cells,
    exactly the outputs the executed English notebook holds (f-string values read from them)."""
    for cell in tr.read_english(lesson).cells:
        results = [o for o in cell.get("outputs", []) if o.output_type == "execute_result"]
        if not tr.is_quiz_cell(cell) or not results:
            continue
        stored = tr._text(results[0].data["text/plain"])
        rendered = tr._display_data(tr.render_quiz(cell.source, tr.shown_values(cell.source, stored)))
        assert rendered["text/plain"] == stored, (
            f"{lesson.name} cell {cell.id}: the stored quiz output differs from what lesson_aids.quiz renders "
            "now; re-execute the English notebook (its output predates quiz.py), then translate")


def quiz_questions(obj):
    return list(obj.questions) if isinstance(obj, quiz_module.Quiz) else []


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_the_korean_quizzes_answer_back_in_korean(lesson):
    """Build each quiz from the Korean notebook's cell source (lesson_aids.quiz's classes) and answer
    it headless: what check() and hint() give back is the Korean text. A text may stay as in English
    only where the translation kept it verbatim (a formula such as "r = π_new / π_old.")."""
    english = {c.id: c for c in nbformat.read(lesson.english, as_version=4).cells}
    korean = nbformat.read(lesson.generated, as_version=4)
    checked = 0
    for cell in korean.cells:
        if not tr.is_quiz_cell(cell):
            continue
        kept = {lit.key for lit in tr.string_literals(english[cell.id].source)}

        def assert_korean(text, where):
            assert HANGUL.search(text) or text in kept, f"{where}: {text!r} is neither Korean nor kept verbatim"

        results = [o for o in english[cell.id].outputs if o.output_type == "execute_result"]
        shown = tr.shown_values(english[cell.id].source, tr._text(results[0].data["text/plain"])) if results else {}
        obj = tr.render_quiz(cell.source, shown, complete=False)
        where = f"{lesson.name} cell {cell.id}"
        if isinstance(obj, quiz_module.Checklist):
            for item in obj.items:
                assert HANGUL.search(item), f"{where}: {item!r}"
            continue
        assert HANGUL.search(obj.title), f"{where}: the quiz title is not translated"
        for q in quiz_questions(obj):
            where = f"{lesson.name} cell {cell.id}: {q.question[:50]!r}"
            assert HANGUL.search(q.question), where
            assert_korean(q.hint(), where)  # (for a MultiSelect, hint() also makes check() name the options)
            if isinstance(q, quiz_module.MultipleChoice):  # MultiSelect included
                for label, text in q.options.items():
                    assert_korean(text, where)
                    if isinstance(q, quiz_module.MultiSelect):  # the right set, or it plus one false option
                        feedback = q.check(sorted(q.answers | {label})).message
                    else:
                        feedback = q.check(label).message
                    if label in q.feedback:
                        assert_korean(q.feedback[label], where)
                        assert q.feedback[label] in feedback, f"{where}, option {label}: {feedback!r}"
            else:  # a computed answer key has a stand-in here (tr._Renderer): check the texts themselves
                if q.explanation:
                    assert_korean(q.explanation, where)
                    assert q.explanation in q.check(q.answer).message
                for text in (q.feedback_low, q.feedback_high, *(why for _, why in q.slips)):
                    if text:
                        assert_korean(text, where)
            checked += 1
        for output in cell.outputs:  # the rendered quiz is the Korean one
            if output.output_type == "execute_result":
                assert HANGUL.search(tr._text(output.data["text/plain"]).split("\n")[0]), where
    assert checked, f"{lesson.name}: no quiz questions found"


ENGLISH_SCAFFOLDING = re.compile(r"Correct\.|Not quite|Try again|Answer in code|gives a hint|Question \d|No hint|"
                                 r"Hint:|ticked|options? (is|are) wrong|Before you move on|\bdone\b")


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_a_korean_quiz_answered_headless_gives_no_english_scaffolding(lesson):
    """Every fixed phrase around the translated texts is Korean: the verdicts (right and wrong
    answers, first and second wrong tries of a MultiSelect, too low and too high), the hints, the
    call to make in the rendered output, the checklist's title."""
    english = {c.id: c for c in nbformat.read(lesson.english, as_version=4).cells}
    seen = 0
    for cell in nbformat.read(lesson.generated, as_version=4).cells:
        if not tr.is_quiz_cell(cell):
            continue
        results = [o for o in english[cell.id].outputs if o.output_type == "execute_result"]
        shown = tr.shown_values(english[cell.id].source, tr._text(results[0].data["text/plain"])) if results else {}
        obj = tr.render_quiz(cell.source, shown, complete=False)
        texts = [tr._text(o.data["text/plain"]) for o in cell.outputs if o.output_type == "execute_result"]
        texts.append(obj.text())
        for q in quiz_questions(obj):
            assert q.lang == "ko", f"{lesson.name} cell {cell.id}: {q.question[:40]!r} is not lang='ko'"
            if isinstance(q, quiz_module.MultiSelect):  # the first wrong try counts, the second names
                wrong = sorted(set(q.options) - q.answers)[:1] or sorted(q.answers)[:1]
                texts += [q.check(wrong).message, q.check(wrong).message, q.check(sorted(q.answers)).message]
            elif isinstance(q, quiz_module.MultipleChoice):
                texts += [q.check(label).message for label in q.options]
            else:
                texts += [q.check(q.answer).message, q.check(q.answer - 1e6).message, q.check(q.answer + 1e6).message]
            texts.append(q.hint())
            seen += 1
        for text in texts:
            match = ENGLISH_SCAFFOLDING.search(text)
            assert not match, f"{lesson.name} cell {cell.id}: English {match.group()!r} in {text[:200]!r}"
    assert seen


@pytest.mark.parametrize("lesson", LESSONS[1:5], ids=lesson_id)
def test_the_korean_exercise_cells_answer_in_korean(lesson):
    """Weeks 2-5: the exercise checks and hints take lang="ko", and their stored outputs (the hint,
    "not attempted yet") are the Korean ones."""
    korean = nbformat.read(lesson.generated, as_version=4)
    cells = [c for c in korean.cells if tr.is_exercise_cell(c)]
    assert cells, f"{lesson.name}: no exercise cells"
    for cell in cells:
        assert 'lang="ko")' in cell.source, f"{lesson.name} cell {cell.id}"
        for output in cell.outputs:
            if output.output_type == "execute_result":
                text = tr._text(output.data["text/plain"])
                assert HANGUL.search(text.split("\n")[0]), f"{lesson.name} cell {cell.id}: {text[:80]!r}"
                assert "Mistakes that" not in text and "not attempted" not in text


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_the_korean_glossary_table_is_korean(lesson):
    """The glossary at the end of a Korean lesson: ``show_glossary([...], lang="ko")``, and its stored
    output is that table (Korean header, Korean meanings), for the lesson's own terms, in both views."""
    korean = nbformat.read(lesson.generated, as_version=4)
    cells = [c for c in korean.cells if tr.is_glossary_cell(c)]
    assert len(cells) == 1, f"{lesson.name}: expected one glossary cell, found {len(cells)}"
    (cell,) = cells
    call = ast.parse(cell.source).body[-1].value
    terms = [item.value for item in call.args[0].elts]
    assert [k.value.value for k in call.keywords if k.arg == "lang"] == ["ko"], f"{lesson.name} cell {cell.id}"
    results = [o for o in cell.outputs if o.output_type == "execute_result"]
    assert len(results) == 1, f"{lesson.name} cell {cell.id}: the glossary cell shows no table"
    text, page = tr._text(results[0].data["text/plain"]), tr._text(results[0].data["text/html"])
    lines = text.split("\n")
    assert lines[0] == "용어집 (English | 한국어 | 뜻)", f"{lesson.name} cell {cell.id}: {lines[0]!r}"
    assert "Glossary" not in text and "meaning" not in text and "<th>뜻</th>" in page
    assert len(lines) == len(terms) + 1
    for term, line in zip(terms, lines[1:]):
        assert line.lstrip().startswith(term + " ") and glossary.GLOSSARY[term] in line
        assert line.endswith(f"| {glossary.MEANINGS_KO[term]}"), f"{lesson.name}, {term}: {line!r}"
        assert glossary.MEANINGS[term] not in line and glossary.MEANINGS[term] not in page
        assert html.escape(glossary.MEANINGS_KO[term]) in page
    assert text == str(glossary.show_glossary(terms, lang="ko"))


def test_the_code_check_fails_on_an_unsanctioned_change():
    """What test_one_source_of_truth_for_code accepts: the merge's changes; not a changed key, another
    argument, or an order key that is not the English question."""
    lesson = LESSONS[0]
    english = next(c for c in tr.read_english(lesson).cells if tr.is_quiz_cell(c) and "MultipleChoice(" in c.source)
    korean = next(c for c in nbformat.read(lesson.generated, as_version=4).cells if c.id == english.id).source
    assert quiz_code_as_sanctioned(english.source, korean)
    order_key = re.search(r'order_key=("(?:[^"\\]|\\.)*"(?:\s*"(?:[^"\\]|\\.)*")*)', korean)
    assert order_key, "the Korean quiz cell has no order_key"
    first_answer = re.search(r'answer="([a-e])"', korean)
    other = "b" if first_answer.group(1) != "b" else "c"
    for changed in (korean.replace(order_key.group(0), 'order_key="Which is right?"', 1),    # another text
                    korean.replace(order_key.group(0), "order_key=None", 1),
                    korean.replace(first_answer.group(0), f'answer="{other}"', 1),          # another key
                    korean.replace("answer=", "answers=", 1),
                    korean.replace(order_key.group(0), order_key.group(0) + ", shuffle=False", 1),
                    korean.replace(",\n" + " " * 8 + order_key.group(0), "", 1)):        # no order key
        assert changed != korean and not quiz_code_as_sanctioned(english.source, changed)


def test_with_order_keys_seeds_the_translated_questions_with_the_english_ones():
    source = ('quiz = Quiz("t", [\n'
              '    MultipleChoice(\n'
              '        "Which is right?",\n'
              '        {"a": "x", "b": "y", "c": "z", "d": "w"}, answer="a",\n'
              '        hint=("one "\n'
              '              "two")),  # parenthesised last argument\n'
              '    MultiSelect(f"Which of {n} hold?", {"a": "x", "b": "y", "c": "z", "d": "w"}, answers=["a", "c"],\n'
              '                hint="h",  # a comment\n'
              '                ),\n'
              '    MultipleChoice("Kept?", {"a": "x", "b": "y"}, answer="a", shuffle=False),\n'
              '    MultipleChoice("Own key?", {"a": "x", "b": "y"}, answer="a", order_key="Own key?"),\n'
              '])\nquiz')
    korean = tr.translate_code(source, [("Which is right?", "어느 것이 맞을까요?"),
                                        ("Which of {n} hold?", "{n}개 중 어느 것이 맞을까요?")])
    merged = tr.with_order_keys(korean, source)
    calls = [n for n in ast.walk(ast.parse(merged)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") in
             ("MultipleChoice", "MultiSelect")]
    keys = [[k.value for k in c.keywords if k.arg == "order_key"] for c in sorted(calls, key=lambda c: c.lineno)]
    assert ast.literal_eval(keys[0][0]) == "Which is right?"
    assert isinstance(keys[1][0], ast.JoinedStr) and ast.unparse(keys[1][0]) == "f'Which of {n} hold?'"
    assert keys[2] == [] and ast.literal_eval(keys[3][0]) == "Own key?"  # no shuffle; an order_key of its own
    assert tr.with_order_keys(merged, source) == merged and "# a comment" in merged
    english_quiz, korean_quiz = tr.render_quiz(source, {"{n}": "4"}), tr.render_quiz(merged, {"{n}": "4"})
    for en, ko in zip(english_quiz.questions, korean_quiz.questions):
        assert list(en.options.values()) == list(ko.options.values())  # the options stay English here
        assert (getattr(en, "answer", None), getattr(en, "answers", None)) == (
            getattr(ko, "answer", None), getattr(ko, "answers", None))
    assert korean_quiz[0].question == "어느 것이 맞을까요?"
    with pytest.raises(ValueError, match="not a string literal"):
        tr.with_order_keys('question = "Q?"\nMultipleChoice(question, {"a": "x", "b": "y"}, answer="a")',
                           'question = "Q?"\nMultipleChoice(question, {"a": "x", "b": "y"}, answer="a")')


def test_with_language_adds_lang_to_the_outer_calls_only():
    source = ('quiz = Quiz("t", [\n    MultipleChoice("q?", {"a": "x", "b": "y"}, answer="a"),\n])\n'
              'checklist(["a b"],)  # done\nexercises.hint("masked_mean")\nexercises.check("masked_mean", f)\n'
              'exercises.show_solution("masked_mean")\nprint(len("x"))\n')
    out = tr.with_language(source, "ko")
    assert out == ('quiz = Quiz("t", [\n    MultipleChoice("q?", {"a": "x", "b": "y"}, answer="a"),\n], lang="ko")\n'
                   'checklist(["a b"], lang="ko",)  # done\nexercises.hint("masked_mean", lang="ko")\n'
                   'exercises.check("masked_mean", f, lang="ko")\nexercises.show_solution("masked_mean")\n'
                   'print(len("x"))\n')
    assert tr.with_language(out, "ko") == out and tr.with_language(source, "en") == source
    assert tr.with_language("checklist(\n    [\"a\"]  # a, b\n)\n", "ko") == "checklist(\n    [\"a\"], lang=\"ko\"  # a, b\n)\n"
    glossary_cell = 'show_glossary(["policy", "actor",\n               "reward"])'
    assert tr.with_language(glossary_cell, "ko") == 'show_glossary(["policy", "actor",\n               "reward"], lang="ko")'
    assert tr.with_language("from course_utils.lesson_aids.glossary import show_glossary\n", "ko") == (
        "from course_utils.lesson_aids.glossary import show_glossary\n")


def test_a_glossary_output_is_rendered_again_in_korean():
    source = 'show_glossary(["policy", "clip fraction"])'
    english = tr._display_data(glossary.show_glossary(["policy", "clip fraction"]))
    obj = tr.glossary_output(source, tr._text(english["text/plain"]), "ko")
    assert str(obj) == str(glossary.show_glossary(["policy", "clip fraction"], lang="ko"))
    assert str(obj).startswith("용어집 (English | 한국어 | 뜻)")
    assert tr.glossary_output(source, "something else", "ko") is None  # not a glossary table: left as it is
    assert tr.glossary_output("terms = ['policy']\nshow_glossary(terms)", tr._text(english["text/plain"]), "ko") is None


# ---------------------------------------------------------------------------------------------
# The drift check itself, on a copy


@pytest.fixture()
def copied_lesson(tmp_path) -> tuple[Path, tr.Lesson]:
    """Week 1 (English, translations, generated Korean) copied into a temp notebooks folder."""
    lesson = LESSONS[0]
    root = tmp_path / "notebooks"
    (root / "translations" / "ko").mkdir(parents=True)
    (root / "ko").mkdir()
    shutil.copy(lesson.english, root / lesson.english.name)
    shutil.copy(lesson.translations_file, root / "translations" / "ko" / lesson.translations_file.name)
    shutil.copy(lesson.generated, root / "ko" / lesson.generated.name)
    return root, tr.lessons(root)[0]


def edit_english(lesson: tr.Lesson, change) -> None:
    nb = nbformat.read(lesson.english, as_version=4)
    change(nb)
    lesson.english.write_text(tr.notebook_text(nb), encoding="utf-8")


def first(nb, kind):
    return next(c for c in nb.cells if (tr.is_quiz_cell(c) if kind == "quiz" else c.cell_type == kind))


def test_the_drift_check_passes_on_the_copy_then_fails_on_a_changed_english_cell(copied_lesson, capsys):
    root, lesson = copied_lesson
    assert tr.check(root) == []  # the copy is in step: the failures below come from the edits
    english = nbformat.read(lesson.english, as_version=4)
    markdown_id, quiz_id = first(english, "markdown").id, first(english, "quiz").id

    def change(nb):
        first(nb, "markdown").source += "\n\nOne more English sentence."
        cell = first(nb, "quiz")
        cell.source = cell.source.replace("quiz = Quiz(", "quiz = Quiz(  # reworded\n    ", 1)

    edit_english(lesson, change)
    problems = tr.check(root)
    stale = [p for p in problems if "changed in English" in p]
    assert len(stale) == 2, problems
    assert all(p.startswith(lesson.english.name) for p in stale)
    assert any(f"cell {markdown_id} " in p for p in stale) and any(f"cell {quiz_id} " in p for p in stale)
    assert any("is not the merge" in p for p in problems)  # the generated notebook is stale too
    with pytest.raises(SystemExit) as exit_info:
        tr.main(["--check", "--notebooks-dir", str(root)])
    assert exit_info.value.code == 1
    assert f"cell {markdown_id} " in capsys.readouterr().out


def test_the_drift_check_names_new_and_removed_cells(copied_lesson):
    root, lesson = copied_lesson
    removed = first(nbformat.read(lesson.english, as_version=4), "markdown").id

    def change(nb):
        nb.cells = [c for c in nb.cells if c.id != removed]
        nb.cells.append(nbformat.v4.new_markdown_cell("## A new English section", id="new-cell-1"))

    edit_english(lesson, change)
    report = tr.drift(tr.read_english(lesson), tr.load_translations(lesson.translations_file))
    assert report.missing == ["new-cell-1"] and report.orphaned == [removed] and not report.stale


def test_a_hand_edited_korean_notebook_fails_the_check(copied_lesson):
    root, lesson = copied_lesson
    lesson.generated.write_text(lesson.generated.read_text(encoding="utf-8").replace("정책", "정책!", 1),
                                encoding="utf-8")
    assert any("is not the merge" in p for p in tr.check(root))
    tr.write(root)
    assert tr.check(root) == []


def test_stamp_records_the_new_english_hash_of_the_named_cell_only(copied_lesson):
    root, lesson = copied_lesson
    ids = [c.id for c in nbformat.read(lesson.english, as_version=4).cells if c.cell_type == "markdown"][:2]

    def change(nb):
        for cell in nb.cells:
            if cell.id in ids:
                cell.source += " (reworded)"

    edit_english(lesson, change)
    tr.stamp(lesson.english.stem, [ids[0]], notebooks_dir=root)
    report = tr.drift(tr.read_english(lesson), tr.load_translations(lesson.translations_file))
    assert report.stale == [ids[1]]


def test_bad_input_is_one_clear_error(copied_lesson):
    root, lesson = copied_lesson
    with pytest.raises(ValueError, match="no lesson 'week99_nothing'; lessons: "):  # a misspelt lesson
        tr.main(["--check", "--notebooks-dir", str(root), "week99_nothing"])
    shutil.copy(lesson.english, root / "week98_untranslated.ipynb")  # a lesson with no translations file yet
    with pytest.raises(ValueError, match="no translations file .*--skeleton week98_untranslated"):
        tr.main(["--check", "--notebooks-dir", str(root), "week98_untranslated"])
    with pytest.raises(ValueError, match="exists already"):
        tr.main(["--skeleton", "--notebooks-dir", str(root), lesson.english.stem])
    lesson.translations_file.write_text("notebook: x\nlanguage: ko\ncells:\n  12345678:\n    source_sha256: ''\n"
                                        "    markdown: '## x'\n", encoding="utf-8")
    with pytest.raises(ValueError, match="quote it"):
        tr.check(root)


# ---------------------------------------------------------------------------------------------
# The pieces


QUIZ_CELL = '''# a comment stays as it is
labels = {"a": "below the band"}   # data: never translated
quiz = Quiz("Week 9 quiz", [
    NumericAnswer(
        f"The model has {hidden} hidden units and {n_layers} layers. How many parameters does one "
        f"q_proj hold, with rank {lora['rank']}?",
        answer=hidden * hidden, tol=0.5,
        explanation=f"{hidden} x {hidden} = {hidden * hidden:,}.",
        hint="inputs x outputs."),
    MultipleChoice("Which is right?", {"a": "This one.", "b": "That one."}, answer="a",
                   feedback={"a": "Yes: \\"this\\".", "b": "No."}),
])
quiz'''


def test_translate_code_changes_only_the_translated_literals():
    strings = [
        ("The model has {hidden} hidden units and {n_layers} layers. How many parameters does one q_proj hold, "
         "with rank {lora['rank']}?",
         "이 모델의 은닉 유닛은 {hidden}개, 층은 {n_layers}개입니다. 랭크가 {lora['rank']}일 때 q_proj 하나에는 "
         "파라미터가 몇 개 있을까요? 아주 길게 써서 줄을 나누어야 하는 한국어 문장입니다."),
        ("{hidden} x {hidden} = {hidden * hidden:,}.", "{hidden} x {hidden} = {hidden * hidden:,}개."),
        ('Yes: "this".', '맞습니다: "이것".'),
        ("Which is right?", "어느 것이 맞을까요?"),
    ]
    korean = tr.translate_code(QUIZ_CELL, strings)
    assert blank_strings(korean) == blank_strings(QUIZ_CELL)
    assert korean.splitlines()[:2] == QUIZ_CELL.splitlines()[:2]
    assert max(tr._width(line) for line in korean.splitlines()) <= tr.LINE_WIDTH
    values = [n.value for n in ast.walk(ast.parse(korean)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert '맞습니다: "이것".' in values and "below the band" in values
    shown = {"{hidden}": "576", "{n_layers}": "30", "{lora['rank']}": "16"}
    question = tr.render_quiz(korean, shown)[0]
    assert question.question.startswith("이 모델의 은닉 유닛은 576개, 층은 30개입니다. 랭크가 16일 때")


def test_translate_code_refuses_slips():
    with pytest.raises(ValueError, match="placeholders"):
        tr.translate_code(QUIZ_CELL, [("{hidden} x {hidden} = {hidden * hidden:,}.", "{hidden} x {hiden}")])
    with pytest.raises(ValueError, match="no string literal"):
        tr.translate_code(QUIZ_CELL, [("Not in the cell.", "없음")])
    with pytest.raises(ValueError, match="no string literal"):  # data, not quiz text
        tr.translate_code(QUIZ_CELL, [("below the band", "구간 아래")])


def test_prose_literals_are_the_quiz_texts():
    found = tr.prose_literals(QUIZ_CELL)
    assert "below the band" not in found and "a" not in found
    assert found[0] == "Week 9 quiz" and "hint" not in found and "inputs x outputs." in found


def test_a_variable_only_a_quiz_reads_is_quiz_text():
    """Options built before the quiz call (week 6b's ``filler_options``) and a word a question's f-string
    shows are translated; a variable the code also reads stays data."""
    source = ('delta = -3.0\n'
              'options = {"a": f"It falls by {abs(delta):.1f} on average.", "b": "It barely moves at all."}\n'
              'key = "a" if delta < 0 else "b"\n'
              'label = "plain_wrong" if delta < 0 else "the top failure"\n'
              'names = {"a": "the right answer"}\n'
              'print(names["a"])\n'
              'MultipleChoice(f"What happens ({label})?", options, answer=key, feedback={"a": names["a"]})\n')
    shown = tr.quiz_only_names(ast.parse(source))
    assert {"options", "key", "label"} <= shown and not {"delta", "names"} & shown
    found = tr.prose_literals(source)
    assert found == ["It falls by {abs(delta):.1f} on average.", "It barely moves at all.", "the top failure",
                     "What happens ({label})?"]
    korean = tr.translate_code(source, [("It barely moves at all.", "거의 움직이지 않습니다."),
                                        ("the top failure", "가장 높은 실패")])
    assert '"b": "거의 움직이지 않습니다."' in korean and '"가장 높은 실패"' in korean
    assert 'names = {"a": "the right answer"}' in korean  # read by print(): data, never translated
    question = tr.render_quiz(korean, {"{abs(delta):.1f}": "3.0", "{label}": "plain_wrong"})
    assert "거의 움직이지 않습니다." in question.options.values()
    assert "It falls by 3.0 on average." in question.options.values()


def test_a_word_the_translation_changes_is_shown_translated():
    """A placeholder that is a variable only the quiz reads, assigned from literals (week 9's old Q6 showed
    ``{q_old_source}``, "the sampler itself" or "a separate forward pass"), shows in the translated quiz
    the translation of the literal the English output shows, as a kernel running the translated cell
    would; numbers and names the code computes with keep the English output's text."""
    source = ('source = "the sampler itself" if mode == "generation" else "a separate forward pass"\n'
              'n = len(rows)\n'
              'Quiz("t", [MultipleChoice("Which?", {"a": f"It reads {source} and {n} rows.", "b": "y"}, '
              'answer="a", shuffle=False)])\n')
    strings = [("the sampler itself", "샘플러 자체"), ("a separate forward pass", "별도의 순전파"),
               ("It reads {source} and {n} rows.", "{source}에서 {n}개 행을 읽습니다.")]
    shown = {"{source}": "the sampler itself", "{n}": "16"}
    assert tr.translated_shown_values(source, shown, strings) == {"{source}": "샘플러 자체", "{n}": "16"}
    assert tr.translated_shown_values(source, {"{source}": "something else", "{n}": "16"}, strings)["{source}"] \
        == "something else"  # not one of the literals the cell assigns: left as shown
    korean = tr.translate_code(source, strings)
    quiz = tr.render_quiz(korean, tr.translated_shown_values(source, shown, strings))
    assert quiz[0].options["a"] == "샘플러 자체에서 16개 행을 읽습니다."


def test_an_f_string_the_translation_changes_is_shown_translated_with_the_english_values():
    """A quiz-only variable assigned one of several f-strings (week 7's lab gap: "a pass rate 6 points above")
    shows, in the translated quiz, the translation of the f-string the English text is a rendering of, filled
    with the values the English text shows for its placeholders; a text that fits none, or an f-string with no
    translation, stays as the English output shows it."""
    source = ('gap = (f"a pass rate {abs(d):.0f} points above" if round(d) > 0 else\n'
              '       f"a pass rate {abs(d):.0f} points below" if round(d) < 0 else "the same pass rate as")\n'
              'Quiz("t", [MultipleChoice(f"The lab has {gap} the run.", {"a": "x", "b": "y"}, answer="a")])\n')
    strings = [("a pass rate {abs(d):.0f} points above", "통과율이 {abs(d):.0f}포인트 높음"),
               ("a pass rate {abs(d):.0f} points below", "통과율이 {abs(d):.0f}포인트 낮음"),
               ("the same pass rate as", "통과율이 같음")]
    show = lambda text, table=strings: tr.translated_shown_values(source, {"{gap}": text}, table)["{gap}"]  # noqa: E731
    assert show("a pass rate 6 points above") == "통과율이 6포인트 높음"
    assert show("a pass rate 12 points below") == "통과율이 12포인트 낮음"
    assert show("the same pass rate as") == "통과율이 같음"
    assert show("a pass rate of its own") == "a pass rate of its own"  # fits no f-string of the cell
    assert show("a pass rate 6 points above", strings[1:]) == "a pass rate 6 points above"  # not translated
    assert tr._refilled("{a} and {a}", "1 and 2", "{a}와 {a}") is None  # one placeholder shown two ways


def test_a_question_showing_a_translated_word_keeps_the_english_order_in_the_stored_output():
    """``order_key`` is the English question as code: a placeholder that is a variable the translation gives
    another text takes that text under a kernel, and would seed another option order. The stored output keeps
    the English order (``order_shown``), and ``translated_question_variables`` names the placeholder."""
    english = ('where = "the sampler" if fast else "a forward pass"\n'
               'Quiz("t", [MultipleChoice(f"Log-probs come from {where}. Why?", {"a": "w", "b": "x", "c": "y", '
               '"d": "z"}, answer="a")])\n')
    korean = tr.with_order_keys(tr.translate_code(english, [
        ("the sampler", "샘플러"), ("a forward pass", "순전파"),
        ("Log-probs come from {where}. Why?", "로그 확률은 {where}에서 나옵니다. 왜?")]), english)
    assert tr.translated_question_variables(korean, english) == ["where"]
    assert tr.translated_question_variables(english, english) == []
    strings = [("the sampler", "샘플러"), ("a forward pass", "순전파")]
    shown = {"{where}": "the sampler"}
    english_quiz = tr.render_quiz(english, shown)
    korean_quiz = tr.render_quiz(korean, tr.translated_shown_values(english, shown, strings), order_shown=shown)
    assert korean_quiz[0].question == "로그 확률은 샘플러에서 나옵니다. 왜?"
    assert list(korean_quiz[0].options.values()) == list(english_quiz[0].options.values())


# Quiz cells whose shuffled question shows a variable the translation changes (see the test above): under a
# kernel the Korean options would come in another order. Week 7's Q (the lab's gap) shows both variables
# translated in its stored Korean output (their f-strings filled with the English output's values), but under a
# kernel its order_key would take the Korean texts: its rewrite with numbers only needs the lesson re-executed
# (docs/cold_reads/2026-12-07c_fixes_weeks06a-07.md, 2026-12-08_fixes_ko_weeks06a-08.md). Week 6b's Q5 no
# longer shows one.
TRANSLATED_QUESTION_VARIABLES = {("week07_ppo_run", "1686b767"): {"lab_gap_words", "lab_gap_noise"}}


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_no_new_question_shows_a_variable_the_translation_changes(lesson):
    english = nbformat.read(lesson.english, as_version=4)
    korean = {c.id: c for c in nbformat.read(lesson.generated, as_version=4).cells}
    for cell in english.cells:
        if tr.is_quiz_cell(cell) and cell.id in korean:
            found = set(tr.translated_question_variables(korean[cell.id].source, cell.source))
            known = TRANSLATED_QUESTION_VARIABLES.get((lesson.english.stem, cell.id), set())
            assert found <= known, (f"{lesson.name} cell {cell.id}: the questions show {sorted(found - known)}, "
                                    "a text the translation changes; write it into the question or an option")


@pytest.mark.parametrize("lesson", LESSONS, ids=lesson_id)
def test_a_korean_quiz_output_shows_no_english_text_it_translates(lesson):
    """No stored Korean quiz output shows an English text its translations file translates (week 9's Q6 once
    showed "the sampler itself" inside a Korean question, read from the English output)."""
    english, t = english_and_translations(lesson)
    korean = {c.id: c for c in nbformat.read(lesson.generated, as_version=4).cells}
    for cell in english.cells:
        entry = t.cells.get(cell.id)
        if not tr.is_quiz_cell(cell) or entry is None or entry.strings is None:
            continue
        shown = "".join(tr._text(o.data.get("text/plain", "")) for o in korean[cell.id].outputs
                        if o.output_type == "execute_result")
        left = [en for en, ko in entry.strings if ko and ko != en and " " in en and not tr._placeholders(en)
                and en in shown]
        assert not left, f"{lesson.name} cell {cell.id}: the Korean quiz output shows {left[0]!r} in English"


def test_shown_values_are_read_from_the_english_output():
    text = ("Week 9 quiz\n\nQuestion 1 (quiz[0]): The model has 576 hidden units and 30 layers. How many "
            "parameters does one q_proj hold, with rank 16?\nAnswer in code: ...")
    assert tr.shown_values(QUIZ_CELL, text) == {"{hidden}": "576", "{n_layers}": "30", "{lora['rank']}": "16"}


def test_the_translations_file_round_trips(tmp_path):
    t = tr.Translations("x.ipynb", "ko", {
        "abc": tr.Entry("", markdown="## 제목\n\n본문 `code`: 끝\n  들여쓴 줄"),
        "def": tr.Entry("f" * 64, markdown="한 줄"),
        "ghi": tr.Entry("", strings=[("What? \"quoted\" {x}", "무엇? \"인용\" {x}"), ("a: b", "")]),
    })
    text = tr.dump_translations(t)
    assert "markdown: |-\n      ## 제목" in text
    path = tmp_path / "x.yaml"
    path.write_text(text, encoding="utf-8")
    assert tr.load_translations(path) == t
