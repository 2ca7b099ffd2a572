"""English ↔ Korean glossary of the course, in one place.

``GLOSSARY`` maps an English term to the Korean term used in the source lessons; ``MEANINGS`` gives
each term a one-line English meaning. A lesson ends with ``show_glossary([...])`` on the terms it
used; the result prints as a text table and renders as an HTML table in Jupyter.
"""

from __future__ import annotations

import difflib
import html

__all__ = ["GLOSSARY", "MEANINGS", "GlossaryTable", "show_glossary", "readme_with_glossary"]

GLOSSARY: dict[str, str] = {
    "policy": "정책",
    "actor": "액터",
    "reference model": "기준 모델",
    "reward": "보상",
    "reward model": "보상 모델",
    "value head": "value 헤드 (밸류 모델)",
    "advantage": "어드밴티지 (이점)",
    "TD residual": "순간 변동폭 (TD 오차)",
    "GAE": "가중 누적 이점",
    "advantage whitening": "어드밴티지 표준화 (whitening)",
    "response mask": "응답 마스크",
    "per-token reward": "토큰별 보상 (셰이핑된 보상)",
    "per-token KL": "토큰별 KL",
    "KL penalty": "KL 벌점",
    "probability ratio": "확률 비율",
    "clipping": "클리핑",
    "objective function": "목적 함수",
    "importance sampling": "중요도 샘플링",
    "on-policy": "정책 내 학습",
    "off-policy": "정책 외 학습",
    "behaviour policy": "행동 정책",
    "target policy": "목표 정책",
    "replay buffer": "리플레이 버퍼",
    "policy lag": "정책 지연",
    "supervised fine-tuning": "지도 미세 조정",
    "frozen": "고정",
    "human preference data": "인간 선호도 데이터",
    "reward hacking": "보상 해킹 (reward hacking)",
    "training stability": "학습 안정성",
    "quiz": "확인 문제",
    "completion checklist": "완료 체크",
    "rollout": "롤아웃",
    "state": "상태 (state)",
    "action": "행동 (action)",
    "chat template": "채팅 템플릿",
    "EOS token": "EOS 토큰",
    "LoRA": "LoRA (저랭크 어댑터)",
    "KL divergence": "KL 발산 (KL divergence)",
    "nats": "나트 (nat, KL의 단위)",
    "clip fraction": "클리핑 비율 (clip fraction)",
    "approximate KL": "근사 KL (approximate KL)",
    "PPO epoch": "PPO 에폭 (같은 배치를 한 번 다 도는 것)",
    "minibatch": "미니배치",
    "rollout age": "롤아웃 나이 (rollout age)",
    "stale batch": "오래된 배치 (stale batch)",
    "effective sample size": "유효 표본 크기 (effective sample size)",
    "Bradley-Terry model": "Bradley–Terry 모델 (쌍 비교 선호 모델)",
    "preference pair": "선호 답변 쌍 (chosen / rejected)",
    "pairwise accuracy": "쌍 비교 정확도 (pairwise accuracy)",
    "reward margin": "reward 차이 (reward margin)",
    "length bias": "길이 편향 (length bias)",
    "point-biserial correlation": "점이연 상관계수 (point-biserial correlation)",
    "padding": "패딩 (padding)",
    "global whitening": "전역 어드밴티지 표준화 (global whitening)",
    "gradient clipping": "그래디언트 클리핑 (gradient clipping)",
    "gradient accumulation": "그래디언트 누적 (gradient accumulation)",
    "data parallelism": "데이터 병렬화 (data parallelism)",
    "all-reduce": "올리듀스 (all-reduce, 프로세스 간 합산)",
    "ZeRO": "ZeRO (옵티마이저 상태 분할)",
    "rollout engine": "롤아웃 엔진 (vLLM 등 생성 전용 엔진)",
    "demonstration": "시연 데이터 (demonstration: 프롬프트와 정답)",
    "warm-up": "워밍업 (PPO 전의 짧은 SFT)",
    "pass@k": "pass@k (k개 샘플 중 하나라도 통과할 확률)",
    "over-optimisation": "과최적화 (over-optimisation)",
    "proxy reward": "대리 보상 (proxy reward: 학습된 보상 모델의 점수)",
    "gold reward": "기준 보상 (gold reward: 실제로 원하는 평가)",
    "target KL": "목표 KL (target KL: 업데이트의 에폭을 일찍 멈추는 기준)",
    "rejection sampling": "거부 샘플링 (rejection sampling)",
    "filtered SFT": "필터링된 SFT (filtered SFT)",
    "RLOO": "RLOO (leave-one-out 기준선)",
    "GRPO": "GRPO (그룹 상대 정책 최적화)",
    "DPO": "DPO (직접 선호 최적화)",
}

MEANINGS: dict[str, str] = {
    "policy": "the model being trained; it picks the next token (the action) given the text so far (the state)",
    "actor": "another name for the policy in actor-critic methods",
    "reference model": "a frozen copy of the starting (SFT) policy; the KL penalty measures distance to it",
    "reward": "the number the training maximises; in PPO-RLHF a score plus per-token KL penalties",
    "reward model": "a frozen model that scores a whole response with one number",
    "value head": "predicts V_t, the return expected from token t on; the baseline of the advantage",
    "advantage": "how much better an action turned out than the value head expected: A = R - V",
    "TD residual": "δ_t = r_t + γ·V_{t+1} - V_t, the one-step surprise",
    "GAE": "A_t = δ_t + γλ·A_{t+1}, computed backwards from the last real token",
    "advantage whitening": "rescaling advantages to mean 0, std 1 over the real (masked-in) tokens only",
    "response mask": "1 on real generated tokens up to and including the first EOS, 0 elsewhere",
    "per-token reward": "r_t = -β·(log π_old - log π_ref) on each token, plus the score on the last one",
    "per-token KL": "a per-token sample estimate of KL(π ‖ π_ref) (k1, k2 or k3)",
    "KL penalty": "-β times the per-token KL estimate: the non-score part of the reward",
    "probability ratio": "r = π_θ(a) / π_old(a), how much more likely the updated policy makes a token",
    "clipping": "capping the ratio's effect at [1 - ε, 1 + ε] inside the objective",
    "objective function": "what training maximises (the loss is its negative)",
    "importance sampling": "reweighting samples from one policy by a ratio to estimate for another",
    "on-policy": "learning only from data the current policy generated",
    "off-policy": "learning from data another (older) policy generated",
    "behaviour policy": "the policy that generated the data (π_old in PPO)",
    "target policy": "the policy being updated (π_θ in PPO)",
    "replay buffer": "a store of old experience reused by off-policy methods; PPO does not keep one",
    "policy lag": "how far the policy has moved past the one that sampled the batch it trains on, in optimizer steps (the rollout age; policy_lag_max per update)",
    "supervised fine-tuning": "training on written demonstrations; the starting point of the policy",
    "frozen": "not updated by the optimiser (reference model, reward model)",
    "human preference data": "pairs of responses where a person marked the better one",
    "reward hacking": "the policy raises the reward model's score without really getting better",
    "training stability": "training that does not diverge, oscillate or collapse",
    "quiz": "the check-your-understanding questions at the end of a lesson",
    "completion checklist": "the list of things you should be able to do after a lesson",
    "rollout": "the policy answering a batch of prompts, with the masks, log-probs and values PPO needs",
    "state": "s_t: the prompt plus the response tokens generated before t",
    "action": "a_t: the next token the policy generates",
    "chat template": "the tokenizer's own conversation format; rendered with add_generation_prompt=True",
    "EOS token": "the token that ends a response (SmolLM2: <|im_end|>, also its padding token)",
    "LoRA": "low-rank adapters: W + (alpha/r)·B·A, only A and B trained; adapter off = the reference",
    "KL divergence": "KL(π ‖ π_ref) = Σ_a π(a)·log(π(a)/π_ref(a)): how different two distributions are, 0 when equal",
    "nats": "the unit of a KL computed with natural logarithms (as everywhere in this course)",
    "clip fraction": "the share of real tokens where PPO's clipped term was chosen, so they send no gradient",
    "approximate KL": "a k3 estimate of KL(π_old ‖ π_θ) over a batch: how far one update moved the policy",
    "PPO epoch": "one pass of minibatch steps over the same rollout batch; ppo_epochs passes reuse it",
    "minibatch": "the slice of a rollout batch that one optimizer step is computed on",
    "rollout age": "how many optimizer steps the policy has taken since it sampled the batch being trained on",
    "stale batch": "a rollout batch older than max_rollout_age steps; its remaining steps are skipped",
    "effective sample size": "(Σ r)² / Σ r²: how many plain samples n importance-weighted ones are worth",
    "Bradley-Terry model": "P(chosen preferred over rejected) = σ(r_chosen − r_rejected); its loss is −log σ(r_c − r_r)",
    "preference pair": "one prompt with a preferred (chosen) and a dispreferred (rejected) answer",
    "pairwise accuracy": "share of held-out pairs where the reward model scores chosen strictly above rejected",
    "reward margin": "r_chosen − r_rejected for one pair; only such differences are learned, not the zero point",
    "length bias": "a reward model paying (or charging) for length itself rather than for a better answer",
    "point-biserial correlation": "Pearson's r between a score and a pass/fail label coded 1/0",
    "padding": "filler positions that make sequences one length; never trained on, never counted in a mean",
    "global whitening": "whitening with the whole batch's mean and variance, all-reduced across processes",
    "gradient clipping": "rescaling the gradient when its global norm exceeds max_grad_norm, before the step",
    "gradient accumulation": "summing the gradients of several micro-batches before one optimizer step",
    "data parallelism": "every process holds the whole model and a share of the batch; gradients are averaged",
    "all-reduce": "a collective that sums (or averages) a tensor over all processes and gives each the result",
    "ZeRO": "DeepSpeed's sharding of optimizer states, gradients and weights across data-parallel processes",
    "rollout engine": "a separate inference server (vLLM, SGLang) that generates rollouts with the latest weights",
    "demonstration": "a prompt with a good answer written out, for supervised fine-tuning",
    "warm-up": "a short SFT before PPO, sized to lift the pass rate off zero while leaving PPO room",
    "pass@k": "the chance that at least one of k sampled answers passes; pass@1 is the mean pass rate of samples",
    "over-optimisation": "the proxy reward still rising while the gold measure stops following it and falls",
    "proxy reward": "the reward PPO actually maximises, e.g. a learned reward model's score",
    "gold reward": "the measure we really care about, here the task checker standing in for human judgement",
    "target KL": "the approximate KL to π_old past which an update's remaining steps are skipped (Spinning Up: 1.5 x target_kl)",
    "rejection sampling": "sample several answers, keep only those a checker (or reward threshold) accepts; RAFT trains on the kept ones",
    "filtered SFT": "SFT on the demonstrations, or the model's own samples, that pass the checker: the strongest non-RL control",
    "RLOO": "REINFORCE leave-one-out: k answers per prompt, each answer's baseline is the mean score of the other k - 1",
    "GRPO": "group relative policy optimisation: PPO's clipped objective with the group's mean and std as baseline, no value head",
    "DPO": "direct preference optimisation: a closed-form loss on preference pairs, no reward model and no sampling",
}


class GlossaryTable:
    """A few glossary rows; prints as text, renders as an HTML table in Jupyter."""

    def __init__(self, terms: list[str]):
        self.rows = [(term, GLOSSARY[term], MEANINGS.get(term, "")) for term in terms]

    def __str__(self) -> str:
        width = max(len(term) for term, _, _ in self.rows)
        lines = ["Glossary (English | 한국어 | meaning)"]
        lines += [f"  {term:<{width}} | {korean} | {meaning}" for term, korean, meaning in self.rows]
        return "\n".join(lines)

    __repr__ = __str__

    def markdown(self) -> str:
        """The rows as a Markdown table (the README's glossary is this table for all terms)."""
        lines = ["| English | 한국어 | meaning |", "|---|---|---|"]
        escape = str.maketrans({"|": "\\|"})  # a literal | would end the table cell
        lines += [f"| **{term}** | {korean} | {meaning.translate(escape)} |" for term, korean, meaning in self.rows]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td><b>{html.escape(term)}</b></td><td>{html.escape(korean)}</td><td>{html.escape(meaning)}</td></tr>"
            for term, korean, meaning in self.rows
        )
        return ("<table><thead><tr><th>English</th><th>한국어</th><th>meaning</th></tr></thead>"
                f"<tbody>{cells}</tbody></table>")


def show_glossary(terms: list[str] | None = None) -> GlossaryTable:
    """The glossary rows of ``terms`` (all terms when None), in the order given.

    Raises KeyError naming the closest known terms for a term that is not in ``GLOSSARY``.
    """
    terms = list(GLOSSARY) if terms is None else list(terms)
    for term in terms:
        if term not in GLOSSARY:
            close = difflib.get_close_matches(term, GLOSSARY, n=3, cutoff=0.4)
            hint = f"did you mean {close}?" if close else f"known terms: {sorted(GLOSSARY)}"
            raise KeyError(f"{term!r} is not in the glossary; {hint} (add it to course_utils/lesson_aids/glossary.py)")
    return GlossaryTable(terms)


README_START = "<!-- glossary:start (generated: python -m course_utils glossary --readme) -->"
README_END = "<!-- glossary:end -->"


def readme_with_glossary(readme: str) -> str:
    """``readme`` with the block between the glossary markers replaced by the full table, so the
    README never drifts from ``GLOSSARY`` (a test compares them)."""
    if README_START not in readme or README_END not in readme:
        raise ValueError(f"the README has no glossary block: add the lines {README_START!r} and {README_END!r}")
    head, rest = readme.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_START}\n{show_glossary().markdown()}\n{README_END}{tail}"
