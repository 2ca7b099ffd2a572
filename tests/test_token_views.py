"""token_views: the mask pictures say which mask colours which part (lesson 2's trap), and which
part of the row (prompt or response) each token is in."""

import re
from types import SimpleNamespace

import pytest
import torch

from course_utils.lesson_aids.token_views import masked_tokens_html, show_rollout


class Pieces:
    """A stand-in tokenizer: token id i decodes to 't<i>'."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"t{i}" for i in ids)


def test_prompt_and_response_parts_get_their_own_colour_and_legend():
    ids = torch.tensor([0, 5, 6, 7, 8, 2, 2])
    mask = torch.tensor([0, 1, 1, 1, 1, 1, 0])  # attention mask on 3 prompt columns, response mask after
    html = masked_tokens_html(Pieces(), ids, mask, prompt_length=3)
    # The prompt's mask-1 tokens are drawn blue, the response's green: the legend names both masks.
    assert html.count("#dbe9f7") == 2 and html.count("#c6efce") == 3
    assert "blue: prompt token with attention mask 1 (read by the model, never trained)" in html
    assert "green: response token with response mask 1 (a trained action)" in html
    assert "green: mask 1 (a trained action)" not in html  # the legend that called prompt tokens actions
    # Each tooltip names its mask: the attention mask on the prompt, the response mask after it.
    assert [t.split(" · ")[-1] for t in tooltips(html)] == ["attention mask 0", "attention mask 1", "attention mask 1",
                                                            "response mask 1", "response mask 1", "response mask 1",
                                                            "response mask 0"]


def test_a_response_mask_alone_keeps_the_short_legend():
    html = masked_tokens_html(Pieces(), [4, 5, 2], [1, 1, 1])
    assert html.count("#c6efce") == 3 and "#dbe9f7" not in html
    assert "green: mask 1 (a trained action)" in html


def tooltips(html: str) -> list[str]:
    return re.findall(r"title='([^']*)'", html)


def a_rollout():
    """Two left-padded prompts of 4 columns and responses of 3 (a stand-in with the fields show_rollout reads)."""
    return SimpleNamespace(
        query_ids=torch.tensor([[0, 0, 10, 11], [12, 13, 14, 15]]),
        query_mask=torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]),
        response_ids=torch.tensor([[20, 2, 2], [21, 22, 23]]),
        response_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]),
        ended_with_eos=torch.tensor([True, False]))


def test_show_rollout_labels_prompt_tokens_as_prompt():
    html = show_rollout(a_rollout(), Pieces(), 0, html=True)
    tips = tooltips(html)
    # The left padding is not shown: two prompt tokens, then the three response positions.
    assert [t.split(" · ")[1] for t in tips] == ["prompt", "prompt", "response", "response", "response"]
    # the mask drawn is the response mask, on the prompt too (0 there): the tooltip names it
    assert tips[0] == "position 0 · prompt · id 10 · response mask 0"
    assert tips[2] == "position 2 · response · id 20 · response mask 1"
    # The prompt has no mask of its own here (0 throughout): no blue, and the legend says so.
    assert "#dbe9f7" not in html and "green: mask 1 (a trained action)" in html


def test_show_rollout_names_the_left_padding_when_shown():
    tips = tooltips(show_rollout(a_rollout(), Pieces(), 0, html=True, show_padding=True))
    assert [t.split(" · ")[1] for t in tips] == ["left padding"] * 2 + ["prompt"] * 2 + ["response"] * 3
    full = tooltips(show_rollout(a_rollout(), Pieces(), 1, html=True))
    assert [t.split(" · ")[1] for t in full] == ["prompt"] * 4 + ["response"] * 3


def test_without_a_prompt_length_every_token_is_a_response_token():
    assert all(" · response · " in t for t in tooltips(masked_tokens_html(Pieces(), [4, 5, 2], [1, 1, 1])))
    with pytest.raises(ValueError, match="prompt_length"):
        masked_tokens_html(Pieces(), [4, 5], [1, 1], prompt_length=3)
