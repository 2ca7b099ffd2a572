"""The noisy teacher: labeler-like mistakes replace a stated share of the gold answers."""

from __future__ import annotations

from collections import Counter

import pytest

from course_utils import noisy_teacher as nt
from course_utils import tasks


@pytest.fixture(scope="module")
def train():
    return tasks.load_split("train")


@pytest.mark.parametrize("style", nt.STYLES)
def test_the_stated_share_of_each_family_fails_the_checker_and_the_rest_is_gold(train, style):
    noisy = nt.noisy_demonstrations(train, 0.25, style, seed=3)
    assert [r.id for r in noisy] == [r.id for r in train]  # same records, same order
    for family in tasks.TASK_FAMILIES:
        rows = [(old, new) for old, new in zip(train, noisy) if old.family == family]
        failed = [new for _, new in rows if not nt.demonstration_passes(new)]
        assert len(failed) == 10  # 25% of the family's 40 train prompts
        assert all("noise" in new.meta and tasks.check(old, new.target).passed is False
                   for old, new in rows if new in failed)
        assert all(new.target == old.target for old, new in rows if "noise" not in new.meta)


def test_a_habit_is_one_mistake_per_family_and_mixed_noise_uses_several(train):
    habit = nt.noisy_demonstrations(train, 0.5, "habit", seed=0)
    mixed = nt.noisy_demonstrations(train, 0.5, "mixed", seed=0)
    for family in tasks.TASK_FAMILIES:
        habit_kinds = Counter(r.meta["noise"] for r in habit if r.family == family and "noise" in r.meta)
        mixed_kinds = Counter(r.meta["noise"] for r in mixed if r.family == family and "noise" in r.meta)
        assert list(habit_kinds) == [nt.family_habit(family, 0)]
        assert len(mixed_kinds) >= 3


def test_mistakes_are_human_never_a_placeholder_or_an_echo(train):
    human = {k for kinds in nt.MISTAKE_KINDS.values() for k in kinds}
    for record in train[::7]:
        kinds = set(nt.labeler_mistakes(record))
        assert kinds and kinds <= human and not kinds & {"placeholder", "echo_input"}


def test_a_higher_rate_adds_noisy_rows_to_the_lower_rates_set(train):
    low = {r.id for r in nt.noisy_demonstrations(train, 0.25, "mixed", seed=1) if "noise" in r.meta}
    high = {r.id for r in nt.noisy_demonstrations(train, 0.5, "mixed", seed=1) if "noise" in r.meta}
    other_seed = {r.id for r in nt.noisy_demonstrations(train, 0.25, "mixed", seed=2) if "noise" in r.meta}
    assert low < high and len(high) == 2 * len(low) and other_seed != low


def test_filtering_keeps_exactly_the_gold_answers_and_bad_settings_are_refused(train):
    noisy = nt.noisy_demonstrations(train, 0.75, "habit", seed=0)
    kept = nt.passing_only(noisy)
    assert len(kept) == 100 and all("noise" not in r.meta for r in kept)
    assert nt.noisy_demonstrations(train, 0.0)[:5] == train[:5]
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        nt.noisy_demonstrations(train, 1.5)
    with pytest.raises(ValueError, match="choose one of habit, mixed"):
        nt.noisy_demonstrations(train, 0.5, "random")
