"""Seeing the response mask: a rollout's tokens coloured by the mask, as text or HTML (lessons 1-2)."""

from __future__ import annotations

from html import escape

import torch

from course_utils.rollout import Rollout


def token_pieces(tokenizer, ids) -> list[str]:
    """The text of each token on its own, with newlines shown as ↵ so one token stays one piece."""
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return [tokenizer.decode([i], skip_special_tokens=False).replace("\n", "↵") for i in ids]


def format_masked_tokens(tokenizer, ids, mask) -> str:
    """Text picture of a mask: tokens with mask 1 in [brackets], tokens with mask 0 bare.

    Example: ``<|im_start|>assistant↵[The][ answer][<|im_end|>]<|im_end|><|im_end|>`` shows the
    kept EOS inside brackets and the padding EOS tokens (same id!) outside.
    """
    mask = mask.tolist() if isinstance(mask, torch.Tensor) else list(mask)
    if len(mask) != len(ids):
        raise ValueError(f"{len(ids)} ids but {len(mask)} mask entries")
    return "".join(f"[{p}]" if m else p for p, m in zip(token_pieces(tokenizer, ids), mask))


_GREEN = "background:#c6efce;color:#0b3d0b;border:1px solid #5cb85c"
_BLUE = "background:#dbe9f7;color:#0b2e5a;border:1px solid #6a9fd4"
_GREY = "background:#f0f0f0;color:#999;border:1px solid #ddd"


def masked_tokens_html(tokenizer, ids, mask, title: str | None = None, prompt_length: int = 0,
                       padding_length: int = 0) -> str:
    """HTML picture of a mask: mask-1 tokens coloured, mask-0 tokens grey; hover a token for its
    position, part (prompt or response), id and mask value. A pure function returning a string
    (display it with ``IPython.display.HTML``).

    ``ids`` may be a prompt followed by its response: give the prompt's length as ``prompt_length``
    (the tooltips then say which part each token is in; without it every token is a response
    token), and the first ``padding_length`` of those prompt positions as left padding. ``mask``
    may have one mask for each part (the attention mask on the prompt, the response mask after
    it): the prompt's mask-1 tokens are then drawn blue (read by the model, never trained), the
    response's green (trained actions). The legend under the tokens names the mask behind each
    colour that appears.
    """
    ids_list = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    mask = mask.tolist() if isinstance(mask, torch.Tensor) else list(mask)
    if len(mask) != len(ids_list):
        raise ValueError(f"{len(ids_list)} ids but {len(mask)} mask entries")
    if not 0 <= padding_length <= prompt_length <= len(ids_list):
        raise ValueError(f"need 0 <= padding_length ({padding_length}) <= prompt_length ({prompt_length}) "
                         f"<= the number of ids ({len(ids_list)})")
    spans = []
    prompt_masked = any(mask[:prompt_length])  # the prompt carries a mask of its own: the attention mask
    for pos, (piece, token_id, m) in enumerate(zip(token_pieces(tokenizer, ids_list), ids_list, mask)):
        style = _GREY if not m else (_BLUE if pos < prompt_length else _GREEN)
        part = "left padding" if pos < padding_length else "prompt" if pos < prompt_length else "response"
        which = "attention mask" if pos < prompt_length and prompt_masked else "response mask"
        tip = f"position {pos} · {part} · id {token_id} · {which} {int(m)}"
        spans.append(
            f"<span title='{escape(tip)}' style='{style};border-radius:3px;padding:0 2px;margin:1px;"
            f"font-family:monospace;white-space:pre;display:inline-block'>{escape(piece)}</span>"
        )
    if prompt_masked:
        text = ("blue: prompt token with attention mask 1 (read by the model, never trained) · green: response "
                "token with response mask 1 (a trained action) · grey: mask 0 (left padding, anything after the "
                "first EOS, or whatever this mask drops)")
    else:
        text = "green: mask 1 (a trained action) · grey: mask 0 (prompt, padding, anything after the first EOS)"
    legend = f"<div style='font-size:90%;color:#555'>{escape(text)}</div>"
    head = f"<div><b>{escape(title)}</b></div>" if title else ""
    return f"<div>{head}<div style='line-height:1.9'>{''.join(spans)}</div>{legend}</div>"


def rollout_row(rollout: Rollout, row: int = 0, show_padding: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt + response ids of one row and the mask over them (0 on the whole prompt).
    Left padding is left out unless ``show_padding``; positions after the first EOS are kept
    (they show why the mask, not the id, decides what is real)."""
    row = _row_index(rollout, row)
    keep = slice(0, None) if show_padding else rollout.query_mask[row].bool().cpu()
    query = rollout.query_ids[row].cpu()[keep]
    ids = torch.cat([query, rollout.response_ids[row].cpu()])
    mask = torch.cat([torch.zeros(len(query)), rollout.response_mask[row].float().cpu()])
    return ids, mask


def _row_index(rollout: Rollout, row) -> int:
    """``row`` as a row number of ``rollout`` (a negative one counts from the end, as in Python), or
    one message naming the rows there are."""
    n = int(rollout.response_ids.shape[0])
    if isinstance(row, bool) or not isinstance(row, int) and not (torch.is_tensor(row) and row.numel() == 1):
        raise TypeError(f"row must be a row number, 0 to {n - 1}, got {row!r}")
    row = int(row)
    if not -n <= row < n:
        raise IndexError(f"row {row} is not in this rollout: it has {n} row{'s' if n != 1 else ''}, 0 to {n - 1}")
    return row % n


def show_rollout(rollout: Rollout, tokenizer, row: int = 0, html: bool = False, show_padding: bool = False) -> str:
    """One rollout row (prompt and response) with its mask drawn over the tokens."""
    row = _row_index(rollout, row)
    ids, mask = rollout_row(rollout, row, show_padding)
    status = "ended with EOS" if bool(rollout.ended_with_eos[row]) else "truncated (no EOS)"
    pads = int((rollout.query_mask[row] == 0).sum())
    hidden = f", {pads} left-padding tokens not shown" if pads and not show_padding else ""
    title = f"row {row}: {int(mask.sum())} response tokens (mask 1), {status}{hidden}"
    if html:
        # rollout_row puts the prompt (with its left padding when shown) first, the response after it.
        prompt_length = len(ids) - rollout.response_ids.shape[1]
        padding = pads if show_padding else 0
        return masked_tokens_html(tokenizer, ids, mask, title, prompt_length=prompt_length, padding_length=padding)
    return f"{title}\n{format_masked_tokens(tokenizer, ids, mask)}"
