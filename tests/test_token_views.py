"""token_views: the mask pictures say which mask colours which part (lesson 2's trap)."""

import torch

from course_utils.lesson_aids.token_views import masked_tokens_html


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


def test_a_response_mask_alone_keeps_the_short_legend():
    html = masked_tokens_html(Pieces(), [4, 5, 2], [1, 1, 1])
    assert html.count("#c6efce") == 3 and "#dbe9f7" not in html
    assert "green: mask 1 (a trained action)" in html
