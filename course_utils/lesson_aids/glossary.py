"""English ↔ Korean glossary of the course, in one place.

``GLOSSARY`` maps an English term to the Korean term the course uses (where the Korean source lessons used
another, that follows as "원본 강의: ...": the Korean week 3 says why TD residual and GAE differ); ``MEANINGS`` gives
each term a one-line English meaning and ``MEANINGS_KO`` the same meaning in Korean (every term has
both; a test checks). A lesson ends with ``show_glossary([...])`` on the terms it used; the result
prints as a text table and renders as an HTML table in Jupyter. ``show_glossary([...], lang="ko")``
gives the table with a Korean header and the Korean meanings: the Korean lessons get ``lang="ko"``
from the translation merge (``machinery/translations.py``), which also renders their stored output.
"""

from __future__ import annotations

import difflib
import html

__all__ = ["GLOSSARY", "MEANINGS", "MEANINGS_KO", "LANGUAGES", "GlossaryTable", "show_glossary",
           "readme_with_glossary"]

GLOSSARY: dict[str, str] = {
    "policy": "정책",
    "actor": "액터",
    "critic": "크리틱",
    "reference model": "기준 모델",
    "reward": "보상",
    "reward model": "보상 모델",
    "value head": "value 헤드 (크리틱)",
    "advantage": "어드밴티지 (이점)",
    "TD residual": "TD 오차 (원본 강의: 순간 변동폭)",
    "GAE": "일반화된 어드밴티지 추정 (원본 강의: 가중 누적 이점)",
    "advantage whitening": "어드밴티지 표준화 (whitening)",
    "response mask": "응답 마스크",
    "per-token reward": "토큰별 보상 (셰이핑된 보상)",
    "per-token KL": "토큰별 KL",
    "KL penalty": "KL 벌점",
    "probability ratio": "확률 비율",
    "clipping": "클리핑",
    "objective function": "목적 함수",
    "clipped surrogate objective": "클리핑된 대리 목적 함수",
    "importance sampling": "중요도 샘플링",
    "on-policy": "정책 내 학습 (온폴리시)",
    "off-policy": "정책 외 학습 (오프폴리시)",
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
    "clip fraction": "클리핑된 토큰 비율 (clip fraction)",
    "approximate KL": "근사 KL (approximate KL)",
    "PPO epoch": "PPO 에폭 (같은 배치를 한 번 다 도는 것)",
    "minibatch": "미니배치",
    "rollout age": "롤아웃 나이 (rollout age)",
    "stale batch": "오래된 배치 (stale batch)",
    "effective sample size": "유효 표본 크기 (effective sample size)",
    "Bradley-Terry model": "Bradley–Terry 모델 (쌍 비교 선호 모델)",
    "preference pair": "선호 답변 쌍 (chosen / rejected)",
    "pairwise accuracy": "쌍 비교 정확도 (pairwise accuracy)",
    "reward margin": "보상 차이 (reward margin)",
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
    "gold reward": "골드 보상 (gold reward: 실제로 원하는 평가)",
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
    "critic": "the part of an actor-critic method that predicts the value; in this course, the value head",
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
    "clipped surrogate objective": "PPO's objective, min(r·A, clip(r, 1 - ε, 1 + ε)·A) per token: a stand-in "
                                   "('surrogate') for the true objective that reuses π_old's samples through the ratio",
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
    "target KL": "the approximate KL to π_old past which an update's remaining steps are skipped (this kit: before each "
                 "minibatch step, that minibatch's k3 estimate, mean per token, past 1.5 x target_kl; Spinning Up: its k1 "
                 "estimate past 1.5 x target_kl, before each step; CleanRL: k3 past target_kl itself, after each epoch)",
    "rejection sampling": "sample several answers, keep only those a checker (or reward threshold) accepts; RAFT trains on the kept ones",
    "filtered SFT": "SFT on the demonstrations, or the model's own samples, that pass the checker: the strongest non-RL control",
    "RLOO": "REINFORCE leave-one-out: k answers per prompt, each answer's baseline is the mean score of the other k - 1",
    "GRPO": "group relative policy optimisation: PPO's clipped objective with the group's mean and std as baseline, no value head",
    "DPO": "direct preference optimisation: a closed-form loss on preference pairs, no reward model and no sampling",
}

MEANINGS_KO: dict[str, str] = {
    "policy": "학습되는 모델. 지금까지의 텍스트(상태)를 보고 다음 토큰(행동)을 고릅니다",
    "actor": "액터-크리틱 방법에서 정책을 부르는 다른 이름",
    "critic": "액터-크리틱 방법에서 value를 예측하는 쪽. 이 강좌에서는 value 헤드입니다",
    "reference model": "출발점(SFT) 정책을 고정해 둔 사본. KL 벌점은 이 모델과의 거리를 잽니다",
    "reward": "학습이 최대화하는 값. PPO-RLHF에서는 점수에 토큰별 KL 벌점을 더한 것입니다",
    "reward model": "응답 전체에 점수 하나를 매기는 고정된 모델",
    "value head": "토큰 t부터 기대되는 리턴 V_t를 예측하는 부분. 어드밴티지의 베이스라인(baseline)이 됩니다",
    "advantage": "행동의 결과가 value 헤드의 예상보다 얼마나 좋았는지: A = R - V",
    "TD residual": "δ_t = r_t + γ·V_{t+1} - V_t, 한 스텝 만에 드러난 예상과의 차이",
    "GAE": "A_t = δ_t + γλ·A_{t+1}. 마지막 실제 토큰에서부터 거꾸로 계산합니다",
    "advantage whitening": "실제 토큰(마스크가 1인 토큰)만으로 어드밴티지를 평균 0, 표준편차 1로 다시 맞추는 것",
    "response mask": "첫 EOS까지(EOS 포함) 실제로 생성된 토큰에는 1, 나머지에는 0",
    "per-token reward": "각 토큰의 r_t = -β·(log π_old - log π_ref). 마지막 토큰에는 점수를 더합니다",
    "per-token KL": "토큰마다 샘플 하나로 추정한 KL(π ‖ π_ref) 값 (k1, k2 또는 k3)",
    "KL penalty": "토큰별 KL 추정값에 -β를 곱한 것. 보상 가운데 점수가 아닌 부분입니다",
    "probability ratio": "r = π_θ(a) / π_old(a). 업데이트된 정책에서 토큰의 확률이 몇 배가 되었는지 나타냅니다",
    "clipping": "목적 함수 안에서 확률 비율의 효과를 [1 - ε, 1 + ε] 구간으로 제한하는 것",
    "objective function": "학습이 최대화하는 값 (손실은 여기에 음의 부호를 붙인 것입니다)",
    "clipped surrogate objective": "PPO가 최대화하는 목적. 토큰마다 min(r·A, clip(r, 1 - ε, 1 + ε)·A)이며, 확률 "
                                   "비율로 π_old의 샘플을 다시 쓰려고 진짜 목적 대신 세운 '대리' 목적입니다",
    "importance sampling": "한 정책에서 얻은 샘플에 확률 비율로 가중치를 주어 다른 정책에 대한 값을 추정하는 방법",
    "on-policy": "현재 정책이 생성한 데이터로만 학습하는 것",
    "off-policy": "다른(더 오래된) 정책이 생성한 데이터로 학습하는 것",
    "behaviour policy": "데이터를 생성한 정책 (PPO에서는 π_old)",
    "target policy": "업데이트되는 정책 (PPO에서는 π_θ)",
    "replay buffer": "정책 외 학습 방법이 다시 쓰려고 모아 두는 과거 경험. PPO는 이것을 두지 않습니다",
    "policy lag": "현재 정책이, 학습 중인 배치를 샘플링한 정책보다 옵티마이저 스텝 몇 번만큼 앞서 나갔는지 "
                  "(롤아웃 나이와 같습니다. 업데이트마다 policy_lag_max로 기록합니다)",
    "supervised fine-tuning": "글로 작성된 시연 데이터(모범 답안)로 학습하는 것. 정책의 출발점입니다",
    "frozen": "옵티마이저가 업데이트하지 않는 상태 (기준 모델, 보상 모델)",
    "human preference data": "두 응답 가운데 사람이 더 나은 쪽을 표시한 응답 쌍들",
    "reward hacking": "정책이 실제로 나아지지 않으면서 보상 모델의 점수만 끌어올리는 것",
    "training stability": "학습이 발산하거나 진동하거나 붕괴하지 않는 것",
    "quiz": "강의 끝에서 이해했는지 확인하는 문제들",
    "completion checklist": "강의를 마친 뒤 할 수 있어야 하는 것들의 목록",
    "rollout": "정책이 프롬프트 배치에 답한 결과. PPO에 필요한 마스크, 로그 확률, value 예측을 함께 담습니다",
    "state": "s_t: 프롬프트와, t 이전에 생성된 응답 토큰들",
    "action": "a_t: 정책이 생성하는 다음 토큰",
    "chat template": "토크나이저에 들어 있는 대화 형식. add_generation_prompt=True로 렌더링합니다",
    "EOS token": "응답을 끝내는 토큰 (SmolLM2에서는 <|im_end|>이며, 패딩 토큰으로도 쓰입니다)",
    "LoRA": "저랭크 어댑터: W + (alpha/r)·B·A에서 A와 B만 학습합니다. 어댑터를 끄면 기준 모델이 됩니다",
    "KL divergence": "KL(π ‖ π_ref) = Σ_a π(a)·log(π(a)/π_ref(a)): 두 분포가 얼마나 다른지 나타내며, 두 분포가 "
                     "같으면 0입니다",
    "nats": "자연로그로 계산한 KL의 단위 (이 강의에서는 어디서나 자연로그를 씁니다)",
    "clip fraction": "실제 토큰 가운데 PPO의 클리핑된 항이 선택되어 그래디언트를 보내지 않는 토큰의 비율",
    "approximate KL": "배치 하나에서 k3로 추정한 KL(π_old ‖ π_θ) 값: 업데이트 한 번에 정책이 얼마나 움직였는지 "
                      "나타냅니다",
    "PPO epoch": "같은 롤아웃 배치를 미니배치 스텝으로 한 번 다 도는 것. ppo_epochs번 돌면서 같은 배치를 다시 씁니다",
    "minibatch": "옵티마이저 스텝 한 번을 계산하는 데 쓰는 롤아웃 배치의 일부",
    "rollout age": "정책이, 지금 학습 중인 배치를 샘플링한 뒤로 거친 옵티마이저 스텝 수",
    "stale batch": "max_rollout_age 스텝보다 오래된 롤아웃 배치. 그 배치의 남은 스텝은 건너뜁니다",
    "effective sample size": "(Σ r)² / Σ r²: 중요도 가중치가 붙은 샘플 n개가 일반 샘플 몇 개만큼의 가치가 있는지 "
                             "나타냅니다",
    "Bradley-Terry model": "P(chosen이 rejected보다 선호됨) = σ(r_chosen − r_rejected). 손실은 −log σ(r_c − r_r)입니다",
    "preference pair": "프롬프트 하나에 선호 답변(chosen)과 비선호 답변(rejected)을 짝지은 것",
    "pairwise accuracy": "따로 떼어 둔 쌍 가운데 보상 모델이 chosen에 rejected보다 엄밀하게 높은 점수를 준 쌍의 비율",
    "reward margin": "한 쌍의 r_chosen − r_rejected. 학습되는 것은 이런 차이뿐이고, 영점은 학습되지 않습니다",
    "length bias": "더 나은 답인지가 아니라 길이 자체에 점수를 더 주는(또는 깎는) 보상 모델의 치우침",
    "point-biserial correlation": "점수와, 1/0으로 나타낸 통과/실패 레이블 사이의 피어슨 상관계수 r",
    "padding": "시퀀스 길이를 맞추려고 채운 자리. 학습에도, 평균 계산에도 쓰지 않습니다",
    "global whitening": "배치 전체의 평균과 분산(프로세스 간에 올리듀스한 값)으로 하는 어드밴티지 표준화",
    "gradient clipping": "스텝을 실행하기 전에, 그래디언트의 전역 노름이 max_grad_norm을 넘으면 그래디언트 크기를 "
                         "줄이는 것",
    "gradient accumulation": "마이크로배치 여러 개의 그래디언트를 더한 뒤 옵티마이저 스텝을 한 번 실행하는 것",
    "data parallelism": "모든 프로세스가 모델 전체와 배치의 일부를 맡고, 그래디언트를 평균하는 방식",
    "all-reduce": "텐서를 모든 프로세스에 걸쳐 더하고(또는 평균하고) 그 결과를 각 프로세스에 돌려주는 집합 연산",
    "ZeRO": "옵티마이저 상태, 그래디언트, 가중치를 데이터 병렬 프로세스들에 나누어 두는 DeepSpeed의 방식",
    "rollout engine": "최신 가중치로 롤아웃을 생성하는 별도의 추론 서버 (vLLM, SGLang)",
    "demonstration": "프롬프트와 함께 좋은 답을 적어 둔 예시. 지도 미세 조정에 씁니다",
    "warm-up": "PPO 전에 하는 짧은 SFT. 통과율을 0에서 끌어올리되 PPO가 더 나아질 여지는 남겨 두도록 분량을 정합니다",
    "pass@k": "샘플링한 답 k개 가운데 적어도 하나가 통과할 확률. pass@1은 샘플들의 평균 통과율입니다",
    "over-optimisation": "대리 보상은 계속 오르는데, 골드 보상은 더는 따라 오르지 않고 오히려 떨어지는 현상",
    "proxy reward": "PPO가 실제로 최대화하는 보상. 예를 들어 학습된 보상 모델의 점수입니다",
    "gold reward": "우리가 정말로 원하는 평가. 이 강의에서는 사람의 판단을 대신하는 과제 채점기입니다",
    "target KL": "π_old와의 근사 KL이 이 기준을 넘으면 그 업데이트의 남은 스텝을 건너뜁니다. 이 키트는 미니배치 "
                 "스텝마다 그 직전에 그 미니배치의 k3 추정값(토큰당 평균)을 재어 1.5 x target_kl을 넘으면 그 스텝부터 "
                 "건너뜁니다. Spinning Up은 스텝마다 k1 추정값을 같은 1.5 x target_kl과 비교하고, CleanRL은 에폭이 "
                 "끝날 때마다 k3를 target_kl 자체와 비교합니다",
    "rejection sampling": "답을 여러 개 샘플링한 뒤 채점기(또는 보상 임곗값)를 통과한 답만 남기는 방법. RAFT는 남긴 "
                          "답으로 학습합니다",
    "filtered SFT": "채점기를 통과한 시연 데이터나 모델 자신의 샘플로 하는 SFT: RL을 쓰지 않는 대조군 가운데 가장 "
                    "강합니다",
    "RLOO": "REINFORCE leave-one-out: 프롬프트마다 답을 k개 만들고, 각 답의 기준선은 나머지 k - 1개 답의 평균 "
            "점수입니다",
    "GRPO": "그룹 상대 정책 최적화: PPO의 클리핑된 목적 함수를 쓰되, 기준선으로는 그룹의 평균과 표준편차를 "
            "씁니다. value 헤드는 없습니다",
    "DPO": "직접 선호 최적화: 선호 답변 쌍에 대한 닫힌 형태의 손실. 보상 모델도, 샘플링도 쓰지 않습니다",
}
"""The meanings of ``MEANINGS`` in Korean (``show_glossary(..., lang="ko")``): the glossary's Korean
terms, code, formulas and numbers as they are."""

LANGUAGES = ("en", "ko")
"""The languages of the table's header and meaning column (``lang=``)."""
HEADERS = {"en": ("Glossary", "meaning"), "ko": ("용어집", "뜻")}
"""Per language: the title of the text table, and the name of the meaning column."""


class GlossaryTable:
    """A few glossary rows; prints as text, renders as an HTML table in Jupyter."""

    def __init__(self, terms: list[str], lang: str = "en"):
        if lang not in LANGUAGES:
            raise ValueError(f"lang must be one of {LANGUAGES}, got {lang!r}")
        self.lang = lang
        meanings = MEANINGS_KO if lang == "ko" else MEANINGS
        self.rows = [(term, GLOSSARY[term], meanings.get(term, "")) for term in terms]

    def __str__(self) -> str:
        title, meaning = HEADERS[self.lang]
        width = max(len(term) for term, _, _ in self.rows)
        lines = [f"{title} (English | 한국어 | {meaning})"]
        lines += [f"  {term:<{width}} | {korean} | {meaning}" for term, korean, meaning in self.rows]
        return "\n".join(lines)

    __repr__ = __str__

    def markdown(self) -> str:
        """The rows as a Markdown table (the README's glossary is this table for all terms)."""
        lines = [f"| English | 한국어 | {HEADERS[self.lang][1]} |", "|---|---|---|"]
        escape = str.maketrans({"|": "\\|"})  # a literal | would end the table cell
        lines += [f"| **{term}** | {korean} | {meaning.translate(escape)} |" for term, korean, meaning in self.rows]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td><b>{html.escape(term)}</b></td><td>{html.escape(korean)}</td><td>{html.escape(meaning)}</td></tr>"
            for term, korean, meaning in self.rows
        )
        return (f"<table><thead><tr><th>English</th><th>한국어</th><th>{HEADERS[self.lang][1]}</th></tr></thead>"
                f"<tbody>{cells}</tbody></table>")


def show_glossary(terms: list[str] | None = None, lang: str = "en") -> GlossaryTable:
    """The glossary rows of ``terms`` (all terms when None), in the order given; ``lang="ko"`` gives
    the Korean header ("용어집 (English | 한국어 | 뜻)") and the Korean meanings.

    Raises KeyError naming the closest known terms for a term that is not in ``GLOSSARY``.
    """
    terms = list(GLOSSARY) if terms is None else list(terms)
    for term in terms:
        if term not in GLOSSARY:
            close = difflib.get_close_matches(term, GLOSSARY, n=3, cutoff=0.4)
            hint = f"did you mean {close}?" if close else f"known terms: {sorted(GLOSSARY)}"
            raise KeyError(f"{term!r} is not in the glossary; {hint} (add it to course_utils/lesson_aids/glossary.py)")
    return GlossaryTable(terms, lang)


README_START = "<!-- glossary:start (generated: python -m course_utils glossary --readme) -->"
README_END = "<!-- glossary:end -->"
README_STARTS = {"en": README_START,
                 "ko": "<!-- glossary:start (generated: python -m course_utils glossary --readme --lang ko) -->"}
"""Per language, the line that opens the README's generated glossary block (README.md, README.ko.md)."""


def readme_with_glossary(readme: str, lang: str = "en") -> str:
    """``readme`` with the block between the glossary markers replaced by the full table, so the
    README never drifts from ``GLOSSARY`` (a test compares them). ``lang="ko"``: README.ko.md's block,
    the table with the Korean header and meanings (``MEANINGS_KO``)."""
    if lang not in README_STARTS:
        raise ValueError(f"lang must be one of {tuple(README_STARTS)}, got {lang!r}")
    start = README_STARTS[lang]
    if start not in readme or README_END not in readme:
        raise ValueError(f"the README has no glossary block: add the lines {start!r} and {README_END!r}")
    head, rest = readme.split(start, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{start}\n{show_glossary(lang=lang).markdown()}\n{README_END}{tail}"
