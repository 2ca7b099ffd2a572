"""course_utils: the helper library of the PPO-RLHF course.

Every formula the lessons teach lives here exactly once; the notebooks import it. The folders say
who reads what.

The algorithm (top level), in reading order for weeks 1-7
----------------------------------------------------------
    device            picking cpu/mps/cuda, dtypes, seeding, threads
    models            the policy with its value head, LoRA and the reference (adapter off), the bundle
    rewards           the reward: task checker, learned reward model, a toy for tests
    rollout           chat prompts, sampling, the response mask, log-probs and values
    ppo_math          the formula book: one function per formula (masks, KL, GAE, the losses)
    sft               the SFT warm-up: LoRA on gold answers, folded into PPO's starting model
    update            ONE PPO update, written as the lesson's pseudocode
    trainer           the loop around it: evaluation, stop rules, checkpoints, the report
    config            every setting of a run, one documented field each, and the presets
    tasks             checkable instruction-following tasks, splits, partial-credit reward
    family_sampling   training prompts drawn by family, weighted by p(1-p) of the pass rate
    preference_pairs  chosen/rejected pairs for the reward model
    noisy_teacher     demonstrations with labeler-like mistakes at a stated rate, and filtered SFT
    reward_model      the Bradley-Terry reward model: training, scoring, evaluation
    retention         what training on some tasks costs the others: gain, change, KL(π_start ‖ π)

Lesson aids (``lesson_aids/``): what notebooks call to show, check and quiz
    plots, widgets, figures, diagrams (lesson 1's two pictures), reward_model_plots, pipeline_plots (the arms, over-optimisation,
    pass@k), token_views, diagnostics, policy_lag, quiz, glossary, exercises (with exercises_ko, its
    Korean), capstone (lesson 11's readings of the measured arms), figure_language (a Korean lesson's
    figures: their texts through the translations table, Hangul from NanumGothic)

The comparison harness (``comparison/``): TRL's PPOTrainer on our configuration, benchmarks
    trl_adapter (TRL built and run one way), child (one child-process launcher),
    trl_compare (lesson 10), bench (speed, memory), bench_learning (learning per seed),
    retention_arms (design (h): the PPO arm's settings, the measures after both arms),
    engines (the bridge: our tasks and checker for verl and TRL's GRPOTrainer), verl_reward
    (the checker as verl's reward function, copied into the export), sampled_measures (pass@1,
    pass@k and token entropy of a finished run), rl_after_sft (design 1's seeds assembled and decided)

Machinery (``machinery/``): what engineers read
    paths, hub (model files), parameters, distributed, metrics, stop_rules, run_checks,
    checkpoint, faults, report, data_files, versions, packed_linear (faster CPU kernels),
    safe_files (strict JSON, atomic writes, the run folder's rules: nothing lost to bad input),
    decode_loop (a plain sampling loop: the rollout with less per-token work),
    calibration (which of those CPU fast paths pay on this machine: measured once, cached),
    notebook_clean (no execution timestamps in committed notebooks),
    translations (the Korean lessons: translations files merged into the English notebooks, drift check),
    site (the course site: static pages from the executed notebooks, offline, and the Colab setup cell),
    lesson_runner (every lesson run headless in order, with a report: the instructor's check)

Formula index (formula -> function)
-----------------------------------
    response mask (up to and including the first EOS)   rollout.response_mask_from_ids
    position ids under left padding                     rollout.positions_from_attention_mask
    log π(a_t | s_t) at a temperature                   ppo_math.logprobs_from_logits
    masked mean / variance / whitening                  ppo_math.masked_mean, ppo_math.masked_var, ppo_math.masked_whiten
    mean and variance over all processes                ppo_math.global_masked_mean_var
    entropy of the next-token distribution              ppo_math.entropy_from_logits, ppo_math.masked_entropy
    KL estimators k1, k2, k3                            ppo_math.kl_estimate
    exact KL from the whole next-token distributions    ppo_math.exact_kl
    KL penalty -β·KL_t (the non-score reward)           ppo_math.kl_penalty_rewards
    score on the last real token                        ppo_math.score_on_last_token
    shaped reward r_t = -β·KL_t + score·1[t = last]     ppo_math.shaped_rewards
    TD residual δ_t = r_t + γ V_{t+1} - V_t             ppo_math.td_residuals
    GAE and returns R_t = A_t + V_t                     ppo_math.masked_gae
    explained variance of the value head                ppo_math.explained_variance
    ratio r = π_new / π_old                             ppo_math.probability_ratio
    clipped surrogate objective and loss                ppo_math.clipped_objective_per_token, ppo_math.clipped_surrogate
    clipped value loss                                  ppo_math.clipped_value_loss
    approximate KL to π_old, ratio statistics           ppo_math.approx_kl, ppo_math.ratio_stats
    fixed and adaptive KL coefficient                   ppo_math.FixedKLController, ppo_math.AdaptiveKLController
    Bradley-Terry pairwise loss                         reward_model.bradley_terry_loss
    the minibatch loss (policy + value - entropy)       update.minibatch_loss
    missing-EOS penalty on the score                    ppo_math.penalise_missing_eos
    SFT loss on the response tokens                     sft.sft_loss
    unbiased pass@k from n samples with c passes        sft.pass_at_k
    family weight p(1-p) + floor of a success rate p    family_sampling.family_weights
    GRPO's group-normalised advantage                   ppo_math.group_normalized_advantages
    DPO's loss on preference pairs                      ppo_math.dpo_loss
    forward KL(π_start ‖ π) of an answer, exact per token  retention.sequence_forward_kl

Command line: ``python -m course_utils --help``.
"""

__version__ = "0.1.0"
