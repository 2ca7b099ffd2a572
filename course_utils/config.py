"""The PPO run configuration: one dataclass, one docstring per field (CleanRL style).

Presets live in ``configs/*.yaml``; ``load_config("configs/cpu.yaml", total_updates=5)`` reads one
and applies overrides. ``PPOConfig.validate()`` rejects bad values up front with one message that
names the field and the fix, before any model is loaded.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from course_utils.machinery.paths import CONFIGS_DIR
from course_utils.ppo_math import KL_ESTIMATORS

REWARD_KINDS = ("checker_partial", "checker_binary", "learned", "letters")
LR_SCHEDULES = ("constant", "linear")
PROMPT_SAMPLINGS = ("shuffled", "success_variance")
SAMPLING_DTYPES = ("float32", "bfloat16", "auto")
AUTO_SWITCHES = ("packed_cpu_linears", "decode_loop")
"""Fields that take true, false or "auto" (chosen by measurement: ``machinery.calibration``)."""
FAST_ENV_VAR = "COURSE_FAST"


@dataclass
class PPOConfig:
    # ----------------------------------------------------------------- run
    run_name: str = "ppo-cpu"
    """Name of the run; its outputs go to ``<output_dir>/<run_name>/``."""
    output_dir: str = "runs"
    """Folder holding one sub-folder per run (config, metrics, checkpoints, report)."""
    seed: int = 0
    """Seeds python, numpy and torch; the same seed gives the same run on the same machine."""
    device: str = "auto"
    """"auto" picks cuda, then mps, then cpu; or name one of them."""
    threads: int = 0
    """torch CPU threads; 0 means "as many as there are cores (at most 8)"."""

    # ----------------------------------------------------------------- models
    model: str = "smollm2-135m-instruct"
    """Policy model: a preset name, a hub id or a local folder (see course_utils.machinery.hub)."""
    lora_rank: int = 16
    """LoRA rank on the policy; 0 means full fine-tuning (and a frozen copy as the reference)."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / rank)."""
    lora_target_modules: list = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                "gate_proj", "up_proj", "down_proj"])
    """Which linear layers get LoRA adapters."""
    reward: str = "checker_partial"
    """Reward source: "checker_partial" (partial credit from the task checkers), "checker_binary"
    (1 if the checker passes, else 0), "learned" (the reward model in ``reward_model_path``) or
    "letters" (a toy reward for smoke tests on the random tiny model)."""
    reward_model_path: str = ""
    """Folder of a trained reward model (used when reward == "learned"); "default" is where
    ``python -m course_utils rm train`` saves it ($COURSE_RM_DIR or ~/.cache/course_utils/reward_model)."""
    checker_noise: float = 0.0
    """With reward "checker_binary": the training checks go through a judge that passes a wrong
    answer with this probability, independently per check and seeded by ``seed``
    (``rewards.NoisyJudge``; lesson 11's design 2). A right answer always passes; the held-out
    evaluations stay strict. 0: the checker itself."""

    # ----------------------------------------------------------------- data and sampling
    train_split: str = "train"
    """Prompt split the policy trains on."""
    eval_split: str = "test"
    """Held-out prompt split for evaluation (greedy answers, checker pass rate)."""
    task_families: list = field(default_factory=list)
    """Restrict training and evaluation to these task families (empty: all)."""
    eval_families: list = field(default_factory=list)
    """Evaluate on these task families instead (empty: the same as ``task_families``). Set it to
    every family while ``task_families`` names a few to watch what training on some tasks does to
    the others (lesson 11's retention design); each evaluation then also records
    ``pass_rate_trained``, the pass rate on the trained families, which the best-policy choice and
    the held-out stop rule read (forgetting elsewhere is measured, not a sign of reward hacking)."""
    batch_size: int = 16
    """Episodes (prompt + sampled response) per PPO update."""
    samples_per_prompt: int = 1
    """Responses sampled for each distinct prompt of a batch: the stream hands out batch_size /
    samples_per_prompt prompts and each is sampled this many times (RLOO's and GRPO's groups). A
    prompt the policy rarely passes then gets several tries in the same update, and its successes
    and failures are compared on the same prompt. 1: every episode has its own prompt."""
    group_baseline: bool = False
    """Subtract from each score the mean score of the other responses to the same prompt (RLOO's
    leave-one-out baseline, ``ppo_math.leave_one_out_baseline``) before the rewards are shaped; the
    value head and GAE then work on what is left. Needs samples_per_prompt >= 2. The missing-EOS
    penalty comes first, so it cancels within a group whose responses were all cut off."""
    drop_uniform_groups: bool = False
    """Reinforce-Rej (Xiong et al. 2025): leave out of the update every group of samples_per_prompt
    responses whose raw scores are all equal (all pass or all fail; ``ppo_math.mixed_groups``): no
    gradient from them, and the advantages are whitened over the other groups only. An update whose
    groups are all uniform takes no step (``rows_trained`` 0 in its metrics). Needs samples_per_prompt >= 2."""
    positive_only: bool = False
    """RAFT++ inside the trainer (design 1's arm D, Xiong et al. 2025): the advantage of every token
    of an answer the checker passes is 1, of a failing answer 0 (``ppo_math.positive_only_advantages``):
    the clipped ratio then only raises what passed, and no negative sample pushes anything down. Needs
    reward "checker_binary" and the parts that would add a baseline or a penalty switched off
    (kl_coef 0, vf_coef 0, whiten_advantages false, group_baseline false, drop_uniform_groups false)."""
    prompt_sampling: str = "shuffled"
    """How training prompts are drawn: "shuffled" (every prompt once per pass, in a seeded order)
    or "success_variance" (families drawn with weight p(1-p) + family_weight_floor, p the family's
    recent checker pass rate on its training answers: batches go where the reward still varies;
    ``course_utils.family_sampling``). Needs a checker reward. Measured on the course's tasks: worse
    than "shuffled" (a family answered at chance has the largest p(1-p))."""
    family_rate_decay: float = 0.9
    """success_variance: the share of past successes and trials each family's estimate keeps per
    update (0.9 remembers about the last ten updates)."""
    family_weight_floor: float = 0.02
    """success_variance: added to every family's p(1-p) (at most 0.25), so solved and out-of-reach
    families fade out of the batches rather than vanish."""
    max_new_tokens: int = 32
    """Longest response, in tokens; longer ones are cut (and counted as truncated)."""
    temperature: float = 0.8
    """Sampling temperature; the training forward uses the same scaling so ratios start at 1."""

    old_logprobs_from: str = "forward"
    """Where the rollout's old log-probs and values come from: "forward" (a separate no-grad
    forward, exactly the training computation) or "generation" (the sampler's own logits and
    hidden states: one forward fewer per update, equal to ~1e-5 in float32)."""
    log_sampler_kl: bool = False
    """Health check for old_logprobs_from="forward": also keep the sampler's own log-probs and log
    ``sampler_kl``, the mean over real tokens of log π_sampler - log π_old (k1, nats). It is ~0 when
    the sampler is π_old; merged half-precision weights made it 0.05 nats on a GPU. Costs the
    logits of every generated token in memory."""
    # Declared bool, the type a running trainer holds: "auto" is resolved by machinery.calibration.
    packed_cpu_linears: bool = "auto"
    """On a CPU in float32: sample and run the old-policy and reference forwards through
    oneDNN-packed copies of the linear layers (``machinery.packed_linear``): the same float32
    maths in another summation order (log-probs within ~1e-4, the same tokens under a seed), at the
    cost of one more copy of the weights in memory. Faster on some CPUs (1.5x sampling on the AMD
    host), slower on others (an Intel Xeon, issue 32): "auto" (default) measures it on this machine
    once (``machinery.calibration``; the choice is in the run's manifest.json); true/false decide
    without measuring. No effect on a GPU or with gradients; false = PyTorch's default kernels."""
    decode_loop: bool = "auto"
    """On a CPU: sample rollouts with the library's plain KV-cache loop (``machinery.decode_loop``:
    a pre-allocated cache, two uniform random numbers per token) instead of transformers'
    ``generate``. The same distribution, EOS rules and log-probs (the same tokens as generate when
    it draws with torch.multinomial, tested). "auto" (default): chosen by measurement on this
    machine, as ``packed_cpu_linears``. Ignored on a GPU and with top_k/top_p; false = ``generate``."""
    sampling_dtype: str = "float32"
    """Opt-in, on a CPU with bfloat16 oneDNN kernels ("auto": only where measured faster, on a CPU
    with native bfloat16, flags avx512_bf16 or amx_bf16): "bfloat16" samples the rollouts through
    bfloat16 copies of the linear layers' weights (``machinery.packed_linear``; a decode step
    streams half the bytes). The sampler is then π_old only up to bfloat16 rounding: with
    old_logprobs_from="generation" the old log-probs are the sampler's own, off the float32 forward
    by the mean |Δ log-prob| ``make bench`` reports (so are the old values, and the KL penalty carries
    the rounding too); with "forward" the ratios stay exact and the samples are slightly off-policy
    (``log_sampler_kl`` measures it). Training stays float32. Memory: a bfloat16 copy of the weights
    (half their float32 size) beside the float32 packed copies, which the other forwards use."""

    # ----------------------------------------------------------------- PPO
    total_updates: int = 60
    """Number of PPO updates (each: one rollout batch, then epochs x minibatches of SGD)."""
    max_train_minutes: float = 0.0
    """Training-time budget: stop once the updates' wall time adds up to this many minutes
    (held-out evaluations and checkpoints are not counted); 0 = no budget. A final evaluation runs
    when the budget is spent, so the run ends with a pass rate; this is not a fault stop."""
    ppo_epochs: int = 2
    """Passes over each rollout batch. More reuse is cheaper but the policy drifts (lesson 9)."""
    num_minibatches: int = 2
    """Minibatches per epoch; batch_size must be divisible by it."""
    learning_rate: float = 2e-4
    """Adam learning rate (peak, if a schedule is used)."""
    lr_schedule: str = "constant"
    """"constant" or "linear": decays to 0 at the end of the run, which is total_updates or, with
    max_train_minutes, the spent budget, whichever comes first (so a budgeted run really ends at 0)."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm before every optimizer step (0 disables)."""
    cliprange: float = 0.2
    """PPO's epsilon: the ratio is clipped to [1 - cliprange, 1 + cliprange]."""
    cliprange_value: float = 0.2
    """The value prediction may move at most this far from the rollout's value (value clipping)."""
    vf_coef: float = 0.1
    """Weight of the value loss in the total loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    gamma: float = 1.0
    """Discount per token. 1.0 is usual for language: the reward arrives at the end anyway."""
    lam: float = 0.95
    """GAE lambda: 0 gives one-step TD advantages, 1 gives Monte-Carlo returns minus V."""
    whiten_advantages: bool = True
    """Normalise advantages over the batch's real tokens (global across processes)."""
    whiten_rewards: bool = False
    """Normalise the scores over the batch before shaping (off by default: scores are in [0, 1])."""
    missing_eos_penalty: float = 0.0
    """Subtracted from the score of every response that ends without an EOS (cut off at
    max_new_tokens), as TRL's ``missing_eos_penalty``; 0 = off. It discourages rambling answers."""

    # ----------------------------------------------------------------- KL to the reference
    kl_coef: float = 0.02
    """beta: weight of the per-token KL penalty (initial value when adaptive)."""
    kl_estimator: str = "k1"
    """Per-token KL estimate in the shaped reward: "k1", "k2" or "k3" (see ppo_math.kl_estimate)."""
    adaptive_kl: bool = False
    """Use the adaptive controller of Ziegler et al. (2019) instead of a fixed beta."""
    kl_target: float = 6.0
    """Adaptive controller: target KL per response, in nats: the per-token KL summed over each
    response, then averaged over the batch (TRL's convention; verl's and OpenRLHF's targets are
    per-token means, about this divided by the response length)."""
    kl_horizon: int = 10000
    """Adaptive controller: episodes over which an error is corrected; at least batch_size (one
    update), else one update corrects more than the error and, below batch_size / 5, turns beta
    negative (the KL penalty a bonus). Validated, not clamped: see evaluation_and_controller_problems."""

    # ----------------------------------------------------------------- evaluation, logging, saving
    eval_every: int = 10
    """Evaluate on held-out prompts every this many updates (and before the first and after the last)."""
    eval_prompts: int = 100
    """How many held-out prompts to evaluate on (balanced across families); at least 1."""
    eval_at_minutes: list = field(default_factory=list)
    """Also evaluate greedily on ``eval_split`` and on its unseen phrasings, per family, at the first
    update boundary after each of these training minutes and at the end of the run, into
    ``checkpoints.jsonl`` (lesson 11's learning curves over a budget; not training time). Empty: none."""
    save_every: int = 1
    """Write a checkpoint every this many updates (atomically; the last good one is kept)."""
    num_sample_prompts: int = 6
    """Fixed evaluation prompts whose answers are saved before, during and after training."""

    # ----------------------------------------------------------------- stop rules
    stop_nonfinite_patience: int = 2
    """Stop after this many consecutive updates with a non-finite loss/reward (their steps are skipped)."""
    stop_max_value_loss: float = 100.0
    """Stop when the value loss exceeds this (the critic diverged)."""
    stop_max_kl: float = 50.0
    """Stop when the mean KL per response to the reference exceeds this many nats."""
    stop_min_entropy: float = 0.01
    """Stop when the mean token entropy falls below this (the policy collapsed)."""
    stop_max_entropy: float = 10.0
    """Stop when the mean token entropy exceeds this (the policy became noise)."""
    stop_min_length: float = 1.0
    """Stop when the mean answer length falls below this many tokens (the EOS not counted, so a
    batch of empty answers, EOS only, has length 0 and trips it)."""
    stop_max_clipfrac: float = 0.5
    """Stop when the policy clip fraction stays above this for ``stop_clipfrac_patience`` updates."""
    stop_clipfrac_patience: int = 3
    """Consecutive updates above ``stop_max_clipfrac`` before stopping."""
    max_rollout_age: int = 16
    """Minibatch steps taken on a rollout batch are skipped once the batch is older than this many
    optimizer steps (stale data); the count of skipped steps is logged."""
    target_kl: float = 0.0
    """KL-based early stopping of an update's epochs: before each minibatch step the approximate KL
    to π_old is measured on that minibatch's forward (the k3 estimate, ``ppo_math.approx_kl``, as
    CleanRL's ``approx_kl``), and once it exceeds 1.5 x target_kl (Spinning Up's slack) the rest of the
    update's steps are skipped (and counted in ``kl_stop_steps_skipped``). 0 = off. A hybrid: Spinning
    Up compares its k1 estimate, mean(log π_old − log π), with 1.5 x target_kl (default 0.01); CleanRL
    compares k3 with target_kl itself. On the same tokens k1 = k3 − (mean ratio − 1), so after steps
    that lowered the mean ratio below 1, k1 is the larger and Spinning Up would stop sooner. It lets
    ``ppo_epochs`` be an upper bound rather than a fixed reuse."""
    stop_hacking_patience: int = 0
    """Stop when the training reward rose but held-out pass rate did not improve for this many
    evaluations in a row (0 disables)."""

    # ----------------------------------------------------------------- fault injection (lessons, tests)
    inject_nan_reward_at: int = -1
    """Test hook: replace the rewards with NaN from this update on, counted from 0 (so the first
    NaN appears in logged update N+1); -1: never."""

    def validate(self) -> "PPOConfig":
        """Reject bad values with one message that names the field and the fix."""
        problems = value_problems(self) + fast_path_problems(self) + evaluation_and_controller_problems(self)
        if problems:
            raise ValueError("Invalid PPO config: " + "; ".join(problems) + ".")
        return self

    def validate_processes(self, world_size: int) -> "PPOConfig":
        """Under torchrun each process takes batch_size / world_size episodes and splits them
        into num_minibatches; every process must take the same number of optimizer steps, or the
        gradient all-reduces pair up different steps and the run hangs."""
        if self.batch_size % (world_size * self.num_minibatches):
            raise ValueError(
                f"Invalid PPO config: batch_size ({self.batch_size}) must be divisible by processes x "
                f"num_minibatches ({world_size} x {self.num_minibatches}); e.g. batch_size="
                f"{world_size * self.num_minibatches * max(1, round(self.batch_size / (world_size * self.num_minibatches)))}."
            )
        if (self.batch_size // self.samples_per_prompt) % world_size:
            raise ValueError(
                f"Invalid PPO config: the {self.batch_size // self.samples_per_prompt} distinct prompts of a batch "
                f"(batch_size / samples_per_prompt) must split evenly over {world_size} processes; change batch_size "
                "or samples_per_prompt."
            )
        if self.drop_uniform_groups and world_size > 1:
            raise ValueError("Invalid PPO config: drop_uniform_groups runs on one process only (each process would "
                             "keep a different number of rows and take a different number of optimizer steps)")
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.run_name

    @classmethod
    def field_docs(cls) -> dict[str, str]:
        """Field name -> its docstring, read from this file (for the docs and the notebooks)."""
        return field_docs(cls)


def positive_only_problems(config) -> list[str]:
    """What keeps ``positive_only`` (RAFT++'s advantage, 1 for a pass and 0 otherwise) from being that
    advantage alone: a reward that is not pass/fail, or a part that adds a baseline or a penalty."""
    if not config.positive_only:
        return []
    problems = []
    if config.reward != "checker_binary":
        problems.append(f'positive_only needs reward "checker_binary" (a pass is a score of 1), got reward {config.reward!r}')
    extra = {"kl_coef": config.kl_coef != 0, "vf_coef": config.vf_coef != 0, "adaptive_kl": config.adaptive_kl,
             "whiten_advantages": config.whiten_advantages, "group_baseline": config.group_baseline,
             "drop_uniform_groups": config.drop_uniform_groups}
    if any(extra.values()):
        problems.append("positive_only sets the advantage itself (1 for a pass, 0 otherwise); switch off "
                        f"{', '.join(k for k, on in extra.items() if on)} (kl_coef=0 vf_coef=0 whiten_advantages=false "
                        "adaptive_kl=false group_baseline=false drop_uniform_groups=false)")
    return problems


def value_problems(config: PPOConfig) -> list[str]:
    """Each field's own range and the fields that must agree (batch size and its splits, the
    reward and what it needs), one message per problem naming the field and the fix."""
    problems = []

    def need(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    need(bool(str(config.run_name).strip()), "run_name must not be empty (the run's folder is output_dir/run_name)")
    need(config.batch_size >= 1, f"batch_size must be >= 1, got {config.batch_size}")
    need(config.num_minibatches >= 1, f"num_minibatches must be >= 1, got {config.num_minibatches}")
    need(config.num_minibatches >= 1 and config.batch_size % config.num_minibatches == 0,
         f"batch_size ({config.batch_size}) must be divisible by num_minibatches ({config.num_minibatches})")
    need(config.samples_per_prompt >= 1 and config.batch_size % max(1, config.samples_per_prompt) == 0,
         f"batch_size ({config.batch_size}) must be a multiple of samples_per_prompt ({config.samples_per_prompt}, "
         f">= 1)")
    need(not config.drop_uniform_groups or config.samples_per_prompt >= 2,
         "drop_uniform_groups needs samples_per_prompt >= 2 (a group is the responses to one prompt)")
    need(not config.group_baseline or config.samples_per_prompt >= 2,
         "group_baseline needs samples_per_prompt >= 2 (the other responses to the same prompt are the baseline)")
    need(config.cliprange > 0, f"cliprange must be > 0 (PPO's epsilon, e.g. 0.2), got {config.cliprange}")
    need(config.cliprange_value > 0, f"cliprange_value must be > 0, got {config.cliprange_value}")
    need(config.kl_estimator in KL_ESTIMATORS,
         f"kl_estimator must be one of {sorted(KL_ESTIMATORS)}, got {config.kl_estimator!r}")
    need(config.kl_coef >= 0, f"kl_coef must be >= 0, got {config.kl_coef}")
    need(not config.adaptive_kl or config.kl_coef > 0, "adaptive_kl needs kl_coef > 0 to start from")
    need(config.old_logprobs_from in ("forward", "generation"),
         f'old_logprobs_from must be "forward" or "generation", got {config.old_logprobs_from!r}')
    need(config.sampling_dtype in SAMPLING_DTYPES,
         f"sampling_dtype must be one of {SAMPLING_DTYPES}, got {config.sampling_dtype!r}")
    need(config.temperature > 0, f"temperature must be > 0, got {config.temperature}")
    need(config.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {config.max_new_tokens}")
    need(0 <= config.gamma <= 1, f"gamma must be in [0, 1], got {config.gamma}")
    need(0 <= config.lam <= 1, f"lam must be in [0, 1], got {config.lam}")
    need(config.learning_rate > 0, f"learning_rate must be > 0, got {config.learning_rate}")
    need(config.lr_schedule in LR_SCHEDULES, f"lr_schedule must be one of {LR_SCHEDULES}, got {config.lr_schedule!r}")
    need(config.ppo_epochs >= 1, f"ppo_epochs must be >= 1, got {config.ppo_epochs}")
    need(config.total_updates >= 1, f"total_updates must be >= 1, got {config.total_updates}")
    need(config.max_train_minutes >= 0, f"max_train_minutes must be >= 0 (0 = no budget), got {config.max_train_minutes}")
    need(config.lora_rank >= 0, f"lora_rank must be >= 0 (0 = full fine-tuning), got {config.lora_rank}")
    need(config.reward in REWARD_KINDS, f"reward must be one of {REWARD_KINDS}, got {config.reward!r}")
    need(config.reward != "learned" or bool(config.reward_model_path),
         'reward "learned" needs reward_model_path (train one with `python -m course_utils rm train`)')
    need(config.eval_every >= 1 and config.save_every >= 1, "eval_every and save_every must be >= 1")
    need(config.max_grad_norm >= 0, f"max_grad_norm must be >= 0, got {config.max_grad_norm}")
    need(config.max_rollout_age >= 0, f"max_rollout_age must be >= 0 optimizer steps (0 = only the first step "
         f"of each batch), got {config.max_rollout_age}")
    need(config.target_kl >= 0, f"target_kl must be >= 0 (0 = no KL early stop; Spinning Up's default is 0.01), got {config.target_kl}")
    need(config.prompt_sampling in PROMPT_SAMPLINGS,
         f"prompt_sampling must be one of {PROMPT_SAMPLINGS}, got {config.prompt_sampling!r}")
    need(config.prompt_sampling != "success_variance" or config.reward != "learned",
         'prompt_sampling "success_variance" reads the checker\'s verdicts on the training answers, which a run '
         'on the learned reward must not see (the checker is its held-out judge): use prompt_sampling=shuffled')
    need(0 < config.family_rate_decay <= 1, f"family_rate_decay must be in (0, 1], got {config.family_rate_decay}")
    need(config.family_weight_floor > 0, f"family_weight_floor must be > 0 (else a family can vanish from the "
         f"batches), got {config.family_weight_floor}")
    need(0 <= config.checker_noise < 1, f"checker_noise is a probability in [0, 1), got {config.checker_noise}")
    need(not config.checker_noise or config.reward == "checker_binary",
         f'checker_noise needs reward "checker_binary" (a judge passes or fails), got reward {config.reward!r}')
    need(config.missing_eos_penalty >= 0, f"missing_eos_penalty must be >= 0 (0 = off), got {config.missing_eos_penalty}")
    return problems + positive_only_problems(config)


def fast_path_problems(config: PPOConfig) -> list[str]:
    """The switches of ``AUTO_SWITCHES`` hold true, false or "auto" (a string like "yes" is a typo)."""
    return [f"{name} must be true, false or auto, got {getattr(config, name)!r}" for name in AUTO_SWITCHES
            if not isinstance(getattr(config, name), bool) and getattr(config, name) != "auto"]


def evaluation_and_controller_problems(config: PPOConfig) -> list[str]:
    """The checks of ``validate`` on evaluation, data selection and the adaptive KL controller.

    The KL horizon is validated rather than beta clamped at 0: the controller multiplies beta by
    1 + e * batch_size / kl_horizon with e in [-0.2, 0.2], so below batch_size / 5 the factor turns
    negative, and a beta clamped at 0 would stay 0 for the rest of the run (0 times any factor),
    the KL anchor silently gone. A horizon shorter than one update (batch_size episodes) is a
    mistake in itself: it corrects more than the whole error at once and makes beta oscillate."""
    from course_utils import tasks

    problems = []
    if config.eval_prompts < 1:
        problems.append(f"eval_prompts must be >= 1 (held-out prompts per evaluation; the pass rate of none is "
                        f"undefined), got {config.eval_prompts}")
    if not all(isinstance(m, (int, float)) and not isinstance(m, bool) and m > 0 for m in config.eval_at_minutes):
        problems.append(f"eval_at_minutes must hold training minutes > 0, got {config.eval_at_minutes}")
    if config.num_sample_prompts < 0:
        problems.append(f"num_sample_prompts must be >= 0, got {config.num_sample_prompts}")
    if config.adaptive_kl and config.kl_target <= 0:
        problems.append(f"kl_target must be > 0 nats per response with adaptive_kl, got {config.kl_target}")
    if config.adaptive_kl and config.kl_horizon < config.batch_size:
        problems.append(f"kl_horizon ({config.kl_horizon}) must be >= batch_size ({config.batch_size}) with adaptive_kl: "
                        "a shorter horizon over-corrects beta every update (below batch_size / 5 it turns negative); "
                        f"e.g. kl_horizon={max(10000, config.batch_size)}")
    for name in ("task_families", "eval_families"):
        unknown = sorted(set(getattr(config, name)) - set(tasks.TASK_FAMILIES))
        if unknown:
            problems.append(f"{name} has unknown families {unknown}; choose from {', '.join(tasks.TASK_FAMILIES)}")
    for name in ("train_split", "eval_split"):
        split = getattr(config, name)
        if split not in (*tasks.SPLITS, tasks.UNSEEN_SPLIT):
            problems.append(f"{name} must be one of {[*tasks.SPLITS, tasks.UNSEEN_SPLIT]}, got {split!r}")
    return problems


def field_docs(cls) -> dict[str, str]:
    """Field name -> the docstring written under it, for a dataclass documented CleanRL style."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(cls))
    docs, body = {}, tree.body[0].body
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr) \
                and isinstance(following.value, ast.Constant):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def load_config(path: str | os.PathLike | None = None, **overrides) -> PPOConfig:
    """Read a YAML preset (or defaults), apply ``overrides``, then validate.

    Unknown keys are an error (a typo must not be silently ignored). With ``COURSE_FAST=1`` in the
    environment the preset's ``fast`` section is applied too: the same run, shortened for CI.
    """
    values: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            presets = sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))
            near = next((str(c) for c in (path.with_suffix(".yaml"), CONFIGS_DIR / f"{path.name}.yaml") if c.is_file()), None)
            hint = f" Did you mean {near}?" if near else ""
            raise FileNotFoundError(f"No config file {path}.{hint} Presets: {', '.join(presets)} (configs/<name>.yaml).")
        try:
            values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ValueError(f"{path} is not valid YAML ({getattr(error, 'problem', None) or 'unreadable'}{where}): "
                             "fix that line, or start from a preset in configs/") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path} is not a config: a YAML file of `field: value` lines was expected "
                             f"(got a {type(values).__name__}). Start from a preset in configs/")
    fast = values.pop("fast", {}) or {}
    if os.environ.get(FAST_ENV_VAR, "0") not in ("", "0"):
        values.update(fast)
    values.update(overrides)
    known = {f.name: f.type for f in fields(PPOConfig)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"Unknown config field(s) {unknown}. Known fields: {', '.join(sorted(known))}.")
    values = {name: coerce_field(name, known[name], value) for name, value in values.items()}
    return PPOConfig(**values).validate()


def coerce_field(name: str, declared: str, value):
    """Turn a YAML or command-line value into the field's declared type, or say what is wrong.

    YAML reads ``5e-4`` (no dot) as a string and ``1`` as an int; both are fine for a float field.
    ``declared`` is the annotation as written in the dataclass (a string, because of
    ``from __future__ import annotations``).
    """
    kind, wanted, example = _FIELD_KINDS.get(declared, (None, "", ""))
    if name in AUTO_SWITCHES:
        if value == "auto":
            return value
        wanted, example = "true, false or auto", "auto"
    if kind is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    if kind is float and not isinstance(value, bool):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(f"Config field {name} must be {wanted}, got {value!r} "
                     f"({type(value).__name__}); e.g. {name}={example}.")


# annotation -> (Python type, how to say it, an example value for the message)
_FIELD_KINDS = {"float": (float, "a number", "0.0005"), "int": (int, "an integer", "16"),
                "bool": (bool, "true or false", "true"), "str": (str, "a string", "text"),
                "list": (list, "a list", "[a, b]")}
