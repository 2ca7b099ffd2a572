"""Korean for ``exercises.py``: the fixed phrases of check()'s and hint()'s messages, in both
languages, and the Korean of every English text the exercises are written with (hints, known
mistakes, the cases' names and notes), keyed by the English text.

Conventions of the Korean edition (``notebooks/translations/ko/``): the terms of
``lesson_aids/glossary.py``; code, identifiers, formulas and numbers as they are. A text missing
here is shown in English (``tests/test_exercises.py`` checks that none is missing).
"""

from __future__ import annotations

PHRASES: dict[str, dict[str, str]] = {
    "en": {
        "not_callable": "failed: check({name!r}, ...) needs your function itself (check({name!r}, {name})), got a {kind}.",
        "passed": "passed: {name} matches {qualname} on all {n} cases ({names}).",
        "not_attempted": "not attempted yet: your {name} still raises NotImplementedError. Replace `raise NotImplementedError` "
                         "with your code (the docstring has the formula; exercises.hint({quoted}) gives a nudge), then run "
                         "this check again.",
        "failed": "failed: your {name} differs from {qualname} on {k} of {n} cases.",
        "case_line": 'Case "{case}": {call}',
        "this_case": "  This case: {note}",
        "and_more": " and {n} more",
        "also_failing": "Also failing: {shown}.",
        "exactly_this_mistake": '{hint} (Your output on "{case}" is exactly what this mistake gives.)',
        "hint_line": "Hint: {hint}",
        "also_line": "Also: {hint}",
        "mistakes_heading": "Mistakes that check() recognises:",
        "not_compared": "your result could not be compared ({error})",
        "padding_position": "padding (mask is 0 there)",
        "last_real_token": "the last real token of row {row}",
        "real_token": "a real token of row {row}",
        "position_is": "position {index} is {what}",
        "in_place": "your function changed its input `{name}` in place",
        "the_result": "the result",
        "tuple_of": "a tuple of {n} tensors ({names})",
        "returned_kind": "your function returned {kind}, expected {wanted}",
        "returned_count": "your function returned {n} values, expected {wanted}",
        "output_k": "output {k} ({name})",
        "is_none": "{what} is None",
        "hint_return": "Is a `return` missing at the end of your function?",
        "not_tensor": "{what} is {kind}, expected a torch.Tensor",
        "hint_tensor": "Build the result with torch operations (torch.as_tensor wraps a number or a list).",
        "zero_dim": " (a 0-dim tensor: one number)",
        "wrong_shape": "{what} has shape {got}, expected {expected}{scalar}",
        "wrong_dtype": "{what} has dtype {got}, expected {expected}",
        "hint_dtype": "Return the same dtype as the library (here {expected}): finish with .to({full}), or compute in the "
                      "inputs' dtype (.float() gives float32).",
        "wrong_device": "{what} is on device {got}, expected {expected} (the inputs' device)",
        "hint_device": "Return the result on the inputs' device: leave out .to(...), .cuda() and .cpu(), or build new "
                       "tensors with device=x.device.",
        "entries_differ": " ({count} of {n} entries differ)",
        "differs_at": "{what} differs at index {index}: expected {expected}, got {got}{tail}",
        "differs_scalar": "{what} differs (a single number): expected {expected}, got {got}{tail}",
        "gradient_of": "the gradient of {output} with respect to {param}",
        "no_gradient": "{output} carries no gradient: loss.backward() would not reach {param}",
        "raised": "your function raised {error}",
        "at": "at {where}",
        "line_of": "line {line} of {function}",
        "part_not_written": "A part of your function is not written yet (it raises NotImplementedError on this case).",
        "mask_value": "<{head} mask, real tokens per row: {counts}>",
        "a_kind": "a {kind}",
        "timed_out": "failed: your {name} took more than {seconds} s on one case and was stopped: most likely an "
                     "endless loop (the library takes milliseconds per case).",
        "hint_endless_loop": "Check that every loop ends: a `while` whose condition never turns false (a counter that "
                             "is never moved), or a loop over a list that grows while it runs. A loop over the time "
                             "steps is `for t in reversed(range(T))`. The cases after this one were not run.",
    },
    "ko": {
        "not_callable": "실패: check({name!r}, ...)에는 작성한 함수 자체를 넘겨야 합니다(check({name!r}, {name})). "
                        "넘긴 것은 {kind} 값입니다.",
        "passed": "통과: 작성한 {name}의 결과가 사례 {n}개 모두에서 {qualname}의 결과와 같습니다({names}).",
        "not_attempted": "아직 시도하지 않음: 작성할 {name} 함수가 아직 NotImplementedError를 일으킵니다. "
                         "`raise NotImplementedError`를 직접 쓴 코드로 바꾼 뒤(식은 docstring에 있고, "
                         "exercises.hint({quoted}, lang='ko')가 실마리를 줍니다) 이 확인을 다시 실행하세요.",
        "failed": "실패: 작성한 {name}의 결과가 사례 {n}개 중 {k}개에서 {qualname}의 결과와 다릅니다.",
        "case_line": '사례 "{case}": {call}',
        "this_case": "  이 사례: {note}",
        "and_more": " 외 {n}개",
        "also_failing": "함께 실패한 사례: {shown}.",
        "exactly_this_mistake": '{hint} ("{case}"에서 나온 출력이 정확히 이 실수가 내는 값입니다.)',
        "hint_line": "힌트: {hint}",
        "also_line": "또한: {hint}",
        "mistakes_heading": "check()가 잡아내는 실수:",
        "not_compared": "결과를 라이브러리의 결과와 비교할 수 없었습니다({error})",
        "padding_position": "패딩(그 자리의 mask는 0)",
        "last_real_token": "{row}행의 마지막 실제 토큰",
        "real_token": "{row}행의 실제 토큰",
        "position_is": "위치 {index}: {what}",
        "in_place": "함수가 입력 `{name}`의 값을 제자리(in place)에서 바꾸었습니다",
        "the_result": "결과",
        "tuple_of": "텐서 {n}개의 튜플({names})",
        "returned_kind": "함수의 반환값이 {kind}입니다. 기대한 반환값은 {wanted}입니다",
        "returned_count": "함수가 값 {n}개를 반환했습니다. 기대한 반환값은 {wanted}입니다",
        "output_k": "출력 {k}({name})",
        "is_none": "{what}: None입니다",
        "hint_return": "함수 끝에 `return`이 빠지지 않았나요?",
        "not_tensor": "{what}: {kind}입니다. torch.Tensor여야 합니다",
        "hint_tensor": "결과를 torch 연산으로 만드세요(숫자나 리스트는 torch.as_tensor로 감쌀 수 있습니다).",
        "zero_dim": "(0차원 텐서: 숫자 하나)",
        "wrong_shape": "{what}: 모양(shape)이 {got}입니다. 기대한 모양은 {expected}{scalar}입니다",
        "wrong_dtype": "{what}: dtype이 {got}입니다. 기대한 dtype은 {expected}입니다",
        "hint_dtype": "라이브러리와 같은 dtype(여기서는 {expected})을 반환하세요. 마지막에 .to({full})를 붙이거나, "
                      "입력의 dtype 그대로 계산하세요(.float()는 float32로 바꿉니다).",
        "wrong_device": "{what}: 장치(device)가 {got}입니다. 기대한 장치는 {expected}(입력의 장치)입니다",
        "hint_device": "결과를 입력과 같은 장치에 두고 반환하세요. .to(...), .cuda(), .cpu()를 빼거나, 새 텐서는 "
                       "device=x.device로 만드세요.",
        "entries_differ": " (원소 {n}개 중 {count}개가 다름)",
        "differs_at": "{what}: 인덱스 {index}에서 다릅니다. 기대값 {expected}, 실제 값 {got}{tail}",
        "differs_scalar": "{what}: 값이 다릅니다(숫자 하나). 기대값 {expected}, 실제 값 {got}{tail}",
        "gradient_of": "{param}에 대한 {output}의 그래디언트",
        "no_gradient": "{output}에 그래디언트가 없습니다. loss.backward()가 {param}까지 닿지 않습니다",
        "raised": "함수에서 {error} 예외가 났습니다",
        "at": "위치: {where}",
        "line_of": "{function}의 {line}번째 줄",
        "part_not_written": "함수의 일부가 아직 작성되지 않았습니다(이 사례에서 NotImplementedError를 일으킵니다).",
        "mask_value": "<{head} mask, 행별 실제 토큰 수: {counts}>",
        "a_kind": "{kind} 값",
        "timed_out": "실패: 작성한 {name} 함수가 한 사례에서 {seconds}초 넘게 실행되어 중단했습니다. 무한 루프일 "
                     "가능성이 큽니다(라이브러리는 사례 하나를 밀리초 안에 끝냅니다).",
        "hint_endless_loop": "모든 루프가 끝나는지 확인하세요. 조건이 끝내 거짓이 되지 않는 `while`(카운터를 움직이지 "
                             "않음)이나, 도는 동안 길어지는 리스트를 도는 루프가 흔한 원인입니다. 시간 단계를 도는 "
                             "루프는 `for t in reversed(range(T))`입니다. 이 사례 뒤의 사례들은 실행하지 않았습니다.",
    },
}

KOREAN: dict[str, str] = {
    "mask[t] = 1 if no EOS occurs at any position < t (so the first EOS is kept), built from positions (cumsum of is_eos), never from ids != pad_id. last_index = the last position with mask 1; ended_with_eos = any EOS in the row; truncated = no EOS. eos_token_id may be one id or a list of ids: torch.isin(response_ids, torch.as_tensor(ids)) handles both.":
        "mask[t]는 t보다 앞선 위치에 EOS가 하나도 없으면 1입니다(그래서 첫 EOS는 1로 남습니다). 마스크는 위치로 만드세요(is_eos의 cumsum). ids != pad_id로 만들면 안 됩니다. last_index는 mask가 1인 마지막 위치, ended_with_eos는 그 행에 EOS가 있는지, truncated는 EOS가 없는지입니다. eos_token_id는 id 하나일 수도, id 리스트일 수도 있습니다. torch.isin(response_ids, torch.as_tensor(ids))는 두 경우를 모두 처리합니다.",
    "The first EOS is an action the policy chose (stopping): keep it in the mask. mask[t] = 1 while no EOS came *before* t, so the EOS itself gets 1.":
        "첫 EOS는 정책이 고른 행동(멈추기)입니다. 마스크에 남겨 두세요. mask[t]는 t보다 *앞에* EOS가 없는 동안 1이므로, EOS 자신은 1을 받습니다.",
    "Build the mask from positions, not from token values (ids != eos): everything after the first EOS is 0 whatever its id, and the EOS itself is 1.":
        "마스크는 토큰 값(ids != eos)이 아니라 위치로 만드세요. 첫 EOS 뒤는 id가 무엇이든 모두 0이고, EOS 자신은 1입니다.",
    "A row without EOS makes argmax return 0 (all entries equal): a truncated response is real up to its last column (mask all ones, last_index = T - 1).":
        "EOS가 없는 행에서는 argmax가 0을 돌려줍니다(모든 값이 같으므로). 잘린(truncated) 응답은 마지막 열까지 실제 토큰입니다(마스크는 전부 1, last_index = T - 1).",
    "last_index is a position, not a length: the last real token sits at length - 1.":
        "last_index는 길이가 아니라 위치입니다. 마지막 실제 토큰은 length - 1에 있습니다.",
    "'truncated' means no EOS at all, not 'the mask reaches the last column': a response whose EOS lands on the last column ended normally.":
        "'truncated'는 'EOS가 아예 없다'는 뜻이지 '마스크가 마지막 열까지 닿는다'는 뜻이 아닙니다. EOS가 마지막 열에 온 응답은 정상적으로 끝난 것입니다.",
    "eos_token_id may be a list of stop ids: any of them ends the response (torch.isin(ids, ...)).":
        "eos_token_id는 멈춤 토큰 id의 리스트일 수 있습니다. 그중 어느 것이 나와도 응답이 끝납니다(torch.isin(ids, ...)).",
    "δ_t = r_t + γ·V_{t+1} - V_t with V_{t+1} = 0 after the last real token; 0 where mask is 0.":
        "δ_t = r_t + γ·V_{t+1} - V_t이고, 마지막 실제 토큰 뒤에서는 V_{t+1} = 0입니다. mask가 0인 곳은 0입니다.",
    "V_{t+1} = 0 after the last real token: the episode ends at the EOS, so nothing may be bootstrapped from the value stored on the padding after it.":
        "마지막 실제 토큰 뒤에서는 V_{t+1} = 0입니다. 에피소드는 EOS에서 끝나므로, 그 뒤 패딩에 저장된 value로 부트스트랩(bootstrap)하면 안 됩니다.",
    "torch.roll wraps around: the last column's V_{t+1} became V_0 of the same row. Shift by appending a column of zeros instead (torch.cat([v[:, 1:], zeros], dim=1)).":
        "torch.roll은 끝에서 처음으로 돌아갑니다. 마지막 열의 V_{t+1}이 같은 행의 V_0이 되어 버렸습니다. 대신 0으로 된 열을 하나 덧붙여 밀어 주세요(torch.cat([v[:, 1:], zeros], dim=1)).",
    "Multiply the next value by γ: δ_t = r_t + γ·V_{t+1} - V_t (you left γ out).":
        "다음 value에 γ를 곱하세요: δ_t = r_t + γ·V_{t+1} - V_t (γ가 빠졌습니다).",
    "δ_t is the TD error: the target r_t + γ·V_{t+1} minus the prediction V_t. You returned the target (V_t is not subtracted).":
        "δ_t는 TD 오차입니다. 목표값 r_t + γ·V_{t+1}에서 예측 V_t를 뺀 값이지요. 지금은 목표값을 그대로 돌려주었습니다(V_t를 빼지 않았습니다).",
    "The sign is reversed: δ_t = r_t + γ·V_{t+1} - V_t (what happened minus what was expected).":
        "부호가 반대입니다: δ_t = r_t + γ·V_{t+1} - V_t (실제로 일어난 것 빼기 기대한 것).",
    "δ_t from td_residuals (V = 0 after the last token); A_t = δ_t + γλ·A_{t+1}, computed backwards with A = 0 after the last token; R_t = A_t + V_t. Both outputs are 0 on the padding.":
        "δ_t는 td_residuals로 구합니다(마지막 토큰 뒤에서는 V = 0). A_t = δ_t + γλ·A_{t+1}을 뒤에서부터 계산하고, 마지막 토큰 뒤에서는 A = 0입니다. R_t = A_t + V_t. 두 출력 모두 패딩에서는 0입니다.",
    "Your recursion ran through the padding: A_{t+1} after the last real token must be 0, so the carry restarts at each row's end (and V there is 0 too).":
        "재귀가 패딩까지 이어졌습니다. 마지막 실제 토큰 뒤의 A_{t+1}은 0이어야 하므로, 누적값은 각 행의 끝에서 새로 시작합니다(그 자리의 V도 0입니다).",
    "GAE runs backwards in time: A_t = δ_t + γλ·A_{t+1} needs the advantage of the NEXT token, so loop from t = T - 1 down to 0.":
        "GAE는 시간을 거슬러 계산합니다. A_t = δ_t + γλ·A_{t+1}에는 *다음* 토큰의 어드밴티지가 필요하므로, t = T - 1부터 0까지 거꾸로 도세요.",
    "γ and λ are swapped: γ discounts the next value inside δ_t = r_t + γ·V_{t+1} - V_t; λ only enters the carry γλ·A_{t+1}.":
        "γ와 λ가 바뀌었습니다. γ는 δ_t = r_t + γ·V_{t+1} - V_t 안에서 다음 value를 할인하고, λ는 누적항 γλ·A_{t+1}에만 들어갑니다.",
    "The carry is γλ·A_{t+1}: you left λ out (that is λ = 1).":
        "누적항은 γλ·A_{t+1}입니다. λ가 빠졌습니다(λ = 1인 셈입니다).",
    "The carry is γλ·A_{t+1}: you left γ out.":
        "누적항은 γλ·A_{t+1}입니다. γ가 빠졌습니다.",
    "returns are R_t = A_t + V_t (the value head's target), not the advantages themselves.":
        "returns는 어드밴티지 자체가 아니라 R_t = A_t + V_t(value 헤드의 목표값)입니다.",
    "returns are R_t = A_t + V_t with the GAE advantage; the discounted reward-to-go equals it only at λ = 1.":
        "returns는 GAE 어드밴티지로 구한 R_t = A_t + V_t입니다. 할인된 보상 합(reward-to-go)은 λ = 1일 때만 이와 같습니다.",
    "mean = Σ mask·x / Σ mask over the real tokens only; with dim, one mean per slice, and 0 for a slice without real tokens.":
        "평균 = Σ mask·x / Σ mask, 실제 토큰만으로 계산합니다. dim이 있으면 조각마다 평균 하나씩이고, 실제 토큰이 없는 조각은 0입니다.",
    "Your mean counted the padding: you divided by the number of all positions, padding included. Divide by the number of real tokens, mask.sum().":
        "평균에 패딩이 들어갔습니다. 패딩을 포함한 전체 위치 수로 나누었습니다. 실제 토큰 수 mask.sum()으로 나누세요.",
    "You averaged every entry, padding values included: only the positions where mask is 1 may enter the sum.":
        "패딩 값까지 모든 원소를 평균했습니다. mask가 1인 위치만 합에 들어가야 합니다.",
    "You averaged per-response means. The library takes a token-level mean: the sum over every real token of the batch divided by their number, so long responses weigh more.":
        "응답별 평균을 다시 평균했습니다. 라이브러리는 토큰 단위 평균을 냅니다. 배치의 모든 실제 토큰의 합을 그 개수로 나누므로, 긴 응답이 더 큰 비중을 갖습니다.",
    "A row with no real tokens must give 0, not NaN (0 / 0): divide by count.clamp(min=1) and put 0 where the count is 0.":
        "실제 토큰이 없는 행은 NaN(0 / 0)이 아니라 0이어야 합니다. count.clamp(min=1)로 나누고, count가 0인 곳에는 0을 넣으세요.",
    "You returned the sum: divide it by the number of real tokens.":
        "합을 돌려주었습니다. 실제 토큰 수로 나누세요.",
    "With dim=1 the result is one mean per row, shape [B]; you returned a single number.":
        "dim=1이면 결과는 행마다 평균 하나, 모양 [B]입니다. 지금은 숫자 하나를 돌려주었습니다.",
    "(x - mean) / sqrt(var + eps), mean and var over the real tokens only (unbiased: divide by n - 1); with shift_mean=False add the mean back; 0 on the padding; the same dtype as x.":
        "(x - mean) / sqrt(var + eps)이고, mean과 var는 실제 토큰만으로 구합니다(unbiased면 n - 1로 나눕니다). shift_mean=False면 평균을 다시 더합니다. 패딩에서는 0이고, dtype은 x와 같습니다.",
    "Your mean and variance counted the padding: compute both over the real tokens only (where mask is 1), then whiten.":
        "평균과 분산에 패딩이 들어갔습니다. 둘 다 실제 토큰(mask가 1인 곳)만으로 계산한 뒤 표준화하세요.",
    "unbiased=True divides the sum of squared deviations by n - 1 (n = number of real tokens), unbiased=False by n: yours uses the other one.":
        "unbiased=True는 편차 제곱의 합을 n - 1로(n = 실제 토큰 수), unbiased=False는 n으로 나눕니다. 지금은 반대쪽을 썼습니다.",
    "shift_mean=False means rescale only: compute (x - mean) / sqrt(var + eps) as usual, then add the mean back.":
        "shift_mean=False는 크기만 바꾼다는 뜻입니다. 평소처럼 (x - mean) / sqrt(var + eps)를 계산한 다음 평균을 다시 더하세요.",
    "With shift_mean=False the library gives (x - mean) / sqrt(var + eps) + mean: the mean stays where it was; x / std scales the mean too.":
        "shift_mean=False일 때 라이브러리는 (x - mean) / sqrt(var + eps) + mean을 돌려줍니다. 평균은 제자리에 있어야 하는데, x / std는 평균까지 함께 늘이거나 줄입니다.",
    "Divide by the standard deviation sqrt(var + eps), not by the variance.":
        "분산이 아니라 표준 편차 sqrt(var + eps)로 나누세요.",
    "V_clip = V_old + clip(V - V_old, -c, c); loss = 0.5 · masked_mean(max((V - R)², (V_clip - R)²)); clipfrac = masked fraction of tokens where the clipped error is strictly larger.":
        "V_clip = V_old + clip(V - V_old, -c, c), loss = 0.5 · masked_mean(max((V - R)², (V_clip - R)²)), clipfrac = 클리핑된 오차가 엄밀하게 더 큰 토큰의 비율(마스크 적용)입니다.",
    "The value loss has a factor 0.5 in front: loss = 0.5 · masked_mean(max((V - R)², (V_clip - R)²)).":
        "value 손실 앞에는 0.5가 붙습니다: loss = 0.5 · masked_mean(max((V - R)², (V_clip - R)²)).",
    "Take the max of the two squared errors (the pessimistic choice); yours takes the min.":
        "두 제곱 오차 중 큰 쪽(비관적인 선택)을 고르세요. 지금은 작은 쪽을 골랐습니다.",
    "You never clipped: the clipped term never takes part, so large moves are not limited. Take the max of (V - R)² and (V_clip - R)².":
        "클리핑을 하지 않았습니다. 클리핑된 항이 전혀 쓰이지 않으니 큰 변화가 제한되지 않습니다. (V - R)²와 (V_clip - R)² 중 큰 쪽을 고르세요.",
    "Clip the CHANGE: V_clip = V_old + clip(V - V_old, -c, c). The value is not a ratio, so there is no clip around 1.":
        "*변화량*을 클리핑하세요: V_clip = V_old + clip(V - V_old, -c, c). value는 비율이 아니므로 1 주변으로 클리핑하지 않습니다.",
    "values are the new predictions and old_values those made at rollout time: the clip is centred on old_values (you swapped them).":
        "values는 새 예측이고 old_values는 롤아웃 때의 예측입니다. 클리핑의 중심은 old_values입니다(둘을 바꾸어 썼습니다).",
    "clipfrac counts the tokens where the clipped error is strictly the larger one, not every token with |V - V_old| > c.":
        "clipfrac은 클리핑된 오차가 엄밀하게 더 큰 토큰만 셉니다. |V - V_old| > c인 토큰을 모두 세는 것이 아닙니다.",
    "r = exp(logprobs - old_logprobs): the current policy over the rollout policy, computed from the difference of log-probs.":
        "r = exp(logprobs - old_logprobs): 현재 정책을 롤아웃 정책으로 나눈 값이며, 로그 확률의 차이로 계산합니다.",
    "Your ratio is upside down: r = π_θ / π_old = exp(logprobs - old_logprobs), the current policy's log-probs minus the old ones (you swapped new and old).":
        "비율이 뒤집혔습니다. r = π_θ / π_old = exp(logprobs - old_logprobs), 즉 현재 정책의 로그 확률에서 이전 정책의 로그 확률을 뺍니다(새것과 이전 것을 바꾸어 썼습니다).",
    "You returned the log-ratio: the ratio is its exponential, exp(logprobs - old_logprobs).":
        "로그 비율을 돌려주었습니다. 비율은 그 지수, exp(logprobs - old_logprobs)입니다.",
    "exp() of each log-prob underflows to 0 on the checker's log-probs near -110 in float32 (0 / 0 = nan): exponentiate the difference of the log-probs instead.":
        "검사 코드가 넣은 −110 근처의 로그 확률에서는 float32로 계산한 로그 확률 각각의 exp()가 0으로 언더플로됩니다(0 / 0 = nan). 대신 로그 확률의 차이에 exp()를 취하세요.",
    "Log-probs are not probabilities: dividing them is not the ratio. Subtract them and exponentiate.":
        "로그 확률은 확률이 아닙니다. 로그 확률끼리 나눈 값은 비율이 아닙니다. 빼고 나서 exp()를 취하세요.",
    "loss = masked_mean(-min(r·A, clip(r, 1 - ε, 1 + ε)·A)) over the real tokens, with r = exp(logprobs - old_logprobs); clipfrac = masked fraction of tokens where the clipped term is strictly the smaller objective.":
        "loss = masked_mean(-min(r·A, clip(r, 1 - ε, 1 + ε)·A)), 실제 토큰만으로 계산하고 r = exp(logprobs - old_logprobs)입니다. clipfrac = 클리핑된 항이 엄밀하게 더 작은 목적값이 되는 토큰의 비율(마스크 적용)입니다.",
    "PPO takes the min of r·A and clip(r, 1 - ε, 1 + ε)·A (the pessimistic objective); yours takes the max.":
        "PPO는 r·A와 clip(r, 1 - ε, 1 + ε)·A 중 작은 쪽(비관적인 목적)을 고릅니다. 지금은 큰 쪽을 골랐습니다.",
    "The loss is minus the objective: PPO maximises the clipped objective, the optimiser minimises the loss. You returned the objective (the minus sign is missing).":
        "손실은 목적 함수에 마이너스를 붙인 값입니다. PPO는 클리핑된 목적을 최대화하고, 옵티마이저는 손실을 최소화합니다. 지금은 목적값을 그대로 돌려주었습니다(마이너스 부호가 빠졌습니다).",
    "You used only the clipped term clip(r)·A: take the min of the unclipped r·A and the clipped term.":
        "클리핑된 항 clip(r)·A만 썼습니다. 클리핑하지 않은 r·A와 클리핑된 항 중 작은 쪽을 고르세요.",
    "You clamped the product r·A into [1 - ε, 1 + ε]; the clip applies to the ratio alone, and then the clipped ratio is multiplied by A: min(r·A, clip(r, 1 - ε, 1 + ε)·A).":
        "곱 r·A를 [1 - ε, 1 + ε]로 잘랐습니다. 클리핑은 비율에만 적용하고, 그다음에 클리핑된 비율에 A를 곱합니다: min(r·A, clip(r, 1 - ε, 1 + ε)·A).",
    "You never clipped: the clipped term never takes part, so large moves are not limited. Take the min of r·A and clip(r, 1 - ε, 1 + ε)·A.":
        "클리핑을 하지 않았습니다. 클리핑된 항이 전혀 쓰이지 않으니 큰 변화가 제한되지 않습니다. r·A와 clip(r, 1 - ε, 1 + ε)·A 중 작은 쪽을 고르세요.",
    "clipfrac counts the tokens where the clipped term was chosen (its objective strictly smaller than r·A). A ratio outside the band is not clipped when the advantage pulls it back inside.":
        "clipfrac은 클리핑된 항이 선택된 토큰(그 목적값이 r·A보다 엄밀하게 작은 토큰)을 셉니다. 어드밴티지가 비율을 구간 안쪽으로 되돌리는 방향이면, 구간 밖의 비율이라도 클리핑된 것이 아닙니다.",
    "lr = logprobs - ref_logprobs; k1 = lr, k2 = lr² / 2, k3 = exp(-lr) - 1 + lr. The mask is optional: with mask=None return the estimate everywhere; with a mask, 0 on the padding.":
        "lr = logprobs - ref_logprobs; k1 = lr, k2 = lr² / 2, k3 = exp(-lr) - 1 + lr. 마스크는 선택 사항입니다. mask=None이면 모든 위치의 추정값을, 마스크가 있으면 패딩에 0을 돌려주세요.",
    "logprobs (the policy that sampled the tokens) comes first: lr = logprobs - ref_logprobs. Swapping the arguments flips the sign of k1 and turns k3 into exp(lr) - 1 - lr. If only your k3 is wrong, you wrote it with ρ = π / π_ref; k3 uses ρ = π_ref / π: exp(-lr) - 1 + lr.":
        "logprobs(토큰을 샘플링한 정책)가 먼저 옵니다: lr = logprobs - ref_logprobs. 두 인자를 바꾸면 k1의 부호가 뒤집히고 k3는 exp(lr) - 1 - lr이 됩니다. k3만 틀렸다면 ρ = π / π_ref로 쓴 것입니다. k3는 ρ = π_ref / π를 씁니다: exp(-lr) - 1 + lr.",
    "The estimators are mixed up: k1 = lr, k2 = lr² / 2, k3 = exp(-lr) - 1 + lr (with lr = logprobs - ref_logprobs).":
        "추정량이 뒤섞였습니다: k1 = lr, k2 = lr² / 2, k3 = exp(-lr) - 1 + lr (lr = logprobs - ref_logprobs).",
    "Your function ignores kind: it returns k1 whatever estimator was asked for ('k1', 'k2' or 'k3').":
        "함수가 kind를 무시합니다. 어떤 추정량('k1', 'k2', 'k3')을 요청해도 k1을 돌려줍니다.",
    "k2 is lr² / 2: keep the 1/2.":
        "k2는 lr² / 2입니다. 1/2을 빼먹지 마세요.",
    "k3 = exp(-lr) - 1 + lr: the exponent is MINUS the log-ratio (it is (ρ - 1) - log ρ with ρ = π_ref / π).":
        "k3 = exp(-lr) - 1 + lr: 지수는 로그 비율에 *마이너스*를 붙인 값입니다(ρ = π_ref / π일 때 (ρ - 1) - log ρ).",
    "r_t = -β·k_t on every real token (k_t = kl_estimate(logprobs, ref_logprobs, kl_estimator)), plus the score on the last real token; 0 on the padding.":
        "모든 실제 토큰에서 r_t = -β·k_t이고(k_t = kl_estimate(logprobs, ref_logprobs, kl_estimator)), 마지막 실제 토큰에는 점수를 더합니다. 패딩에서는 0입니다.",
    "The score belongs on the LAST real token (the EOS, or the last column of a truncated response), not on the first token.":
        "점수는 첫 토큰이 아니라 *마지막* 실제 토큰(EOS, 또는 잘린 응답의 마지막 열)에 놓입니다.",
    "You put the score on the last column of the tensor; with padding the last real token comes earlier. Find it from the mask (ppo_math.last_token_index).":
        "점수를 텐서의 마지막 열에 놓았습니다. 패딩이 있으면 마지막 실제 토큰은 그보다 앞에 있습니다. 마스크로 찾으세요(ppo_math.last_token_index).",
    "The score sits ON the last real token (the EOS, or the last column of a truncated response), not on the position after it.":
        "점수는 마지막 실제 토큰(EOS, 또는 잘린 응답의 마지막 열) *위에* 놓입니다. 그다음 위치가 아닙니다.",
    "The KL term is a penalty: r_t = -β·k_t (+ the score on the last token). Yours adds +β·k_t.":
        "KL 항은 벌점입니다: r_t = -β·k_t (+ 마지막 토큰의 점수). 지금은 +β·k_t를 더했습니다.",
    "The log-ratio is logprobs - ref_logprobs (the policy that sampled the tokens first); you swapped the two.":
        "로그 비율은 logprobs - ref_logprobs입니다(토큰을 샘플링한 정책이 먼저). 둘을 바꾸어 썼습니다.",
    "Multiply the KL estimate by kl_coef (β): r_t = -β·k_t.":
        "KL 추정값에 kl_coef(β)를 곱하세요: r_t = -β·k_t.",
    "Add the score to the last token's penalty (r_last = -β·k_last + score) instead of overwriting it.":
        "점수로 마지막 토큰의 벌점을 덮어쓰지 말고 더하세요(r_last = -β·k_last + score).",
    "Pass kl_estimator on to the KL estimate (kl_estimate(..., kind=kl_estimator)): you always used k1.":
        "kl_estimator를 KL 추정에 넘기세요(kl_estimate(..., kind=kl_estimator)). 지금은 언제나 k1을 썼습니다.",
    "Something on the way cut the graph: .item(), .detach(), float(...), NumPy, torch.no_grad() or torch.tensor(...) of an intermediate result. Keep every step a torch operation on the inputs.":
        "중간에 무언가가 계산 그래프를 끊었습니다: .item(), .detach(), float(...), NumPy, torch.no_grad(), 또는 중간 결과에 대한 torch.tensor(...). 모든 단계를 입력에 대한 torch 연산으로 유지하세요.",
    "The loss value is right but its gradient is not: part of the computation was detached or replaced by a constant. Build the loss from the inputs with torch operations only.":
        "손실 값은 맞지만 그 그래디언트가 틀렸습니다. 계산의 일부가 분리(detach)되었거나 상수로 바뀌었습니다. 손실을 입력에서부터 torch 연산만으로 만드세요.",
    "Do not modify the inputs: the caller still needs them, and autograd breaks on in-place edits of a tensor that requires grad. Build new tensors (torch.where, x.clone(), out-of-place ops).":
        "입력을 바꾸지 마세요. 호출한 쪽이 아직 그 입력을 쓰고, requires_grad인 텐서를 제자리(in place)에서 고치면 autograd가 깨집니다. 새 텐서를 만드세요(torch.where, x.clone(), 제자리가 아닌 연산).",
    "Your result has NaN or inf where the library's is finite: a 0 / 0 (a row without real tokens), an exp() that overflowed or underflowed, or inf * 0 from multiplying by the mask. Select with torch.where instead of multiplying, and divide only where the count is > 0.":
        "라이브러리 결과는 유한한데 여러분의 결과에는 NaN이나 inf가 있습니다. 0 / 0(실제 토큰이 없는 행), 오버플로나 언더플로된 exp(), 또는 마스크를 곱해서 생긴 inf * 0 때문입니다. 곱하는 대신 torch.where로 고르고, 개수가 0보다 큰 곳에서만 나누세요.",
    "The loss value is right but its gradient is NaN or inf where the library's is finite: exp() overflowed on the garbage that the padding holds, and masking after exp() (torch.where or × mask) hides the value but not the gradient (the backward pass computes 0 · inf = NaN). Blank the padding before exp(): torch.where(mask.bool(), logprobs - old_logprobs, 0.0). A NaN here spreads, through the backward pass, to the gradient of every weight.":
        "손실 값은 맞지만, 라이브러리의 그래디언트가 유한한 곳에서 여러분의 그래디언트는 NaN이나 inf입니다. 패딩에 든 쓰레기 값에서 exp()가 오버플로했고, exp() 뒤에 마스킹하면(torch.where나 × mask) 값은 가려도 그래디언트는 가리지 못합니다(역전파가 0 · inf = NaN을 계산합니다). exp() 전에 패딩을 지우세요: torch.where(mask.bool(), logprobs - old_logprobs, 0.0). 여기서 생긴 NaN은 역전파를 타고 모든 가중치의 그래디언트로 번집니다.",
    "Every per-token output must be exactly 0 where mask is 0 (the padding): finish with torch.where(mask.bool(), result, 0.0).":
        "토큰별 출력은 mask가 0인 곳(패딩)에서 정확히 0이어야 합니다. 마지막에 torch.where(mask.bool(), result, 0.0)를 적용하세요.",
    "The mask may be float (1.0 / 0.0): index with mask.bool(), or select with torch.where.":
        "마스크가 float(1.0 / 0.0)일 수 있습니다. mask.bool()로 인덱싱하거나 torch.where로 고르세요.",
    "Your function must accept the same arguments as the library's: {signature}":
        "함수는 라이브러리 함수와 같은 인자를 받아야 합니다: {signature}",
    "Two tensors of different shapes met: check which ones are [B, T] and which are [B].":
        "모양이 다른 두 텐서가 만났습니다. 어느 것이 [B, T]이고 어느 것이 [B]인지 확인하세요.",
    "padding after EOS":
        "EOS 뒤의 패딩",
    "pad id 0, EOS id 2: the EOS is kept (mask 1), the padding after it gets 0":
        "패딩 id 0, EOS id 2: EOS는 남고(mask 1), 그 뒤의 패딩은 0을 받습니다",
    "an EOS-only response":
        "EOS만 있는 응답",
    "row 0 is an empty answer, EOS first: mask [1, 0, 0, 0, 0], last_index 0":
        "0행은 EOS가 맨 앞에 온 빈 답입니다: mask [1, 0, 0, 0, 0], last_index 0",
    "a truncated response (no EOS)":
        "잘린 응답(EOS 없음)",
    "row 0 has no EOS: every position is real, last_index = T - 1, truncated = True":
        "0행에는 EOS가 없습니다: 모든 위치가 실제 토큰이고, last_index = T - 1, truncated = True",
    "EOS on the last column":
        "마지막 열의 EOS",
    "row 0 ended with its EOS exactly at the length limit: it ended, it is not truncated":
        "0행은 길이 제한에 딱 맞춰 EOS로 끝났습니다: 끝난 것이지 잘린 것이 아닙니다",
    "pad == eos":
        "pad == eos",
    "the pad id is the EOS id (as for SmolLM2): only the FIRST EOS ends the response":
        "패딩 id가 EOS id와 같습니다(SmolLM2처럼): *첫* EOS만 응답을 끝냅니다",
    "random responses (seed 0, 5 x 8)":
        "무작위 응답 (seed 0, 5 x 8)",
    "random responses, pad == eos (seed 1, 6 x 10)":
        "무작위 응답, pad == eos (seed 1, 6 x 10)",
    "two stop tokens (eos_token_id is a list)":
        "멈춤 토큰 두 개 (eos_token_id가 리스트)",
    "eos_token_id = [2, 3]: either id ends the response (torch.isin)":
        "eos_token_id = [2, 3]: 어느 id든 응답을 끝냅니다(torch.isin)",
    "a single column (T = 1)":
        "열 하나 (T = 1)",
    "responses of one generated token: an EOS (ended) and a word (truncated)":
        "생성된 토큰이 하나뿐인 응답들: EOS(끝남)와 단어 하나(잘림)",
    "random batch (seed 0, 4 x 7)":
        "무작위 배치 (seed 0, 4 x 7)",
    "random batch (seed 1, 3 x 12)":
        "무작위 배치 (seed 1, 3 x 12)",
    "both responses end with an EOS followed by padding; the values stored on the padding are garbage":
        "두 응답 모두 EOS 뒤에 패딩이 옵니다. 패딩에 저장된 값은 쓰레기 값입니다",
    "row 0 is only its EOS: mask [1, 0, 0, 0, 0]":
        "0행은 EOS 하나뿐입니다: mask [1, 0, 0, 0, 0]",
    "row 0 was cut off at the length limit: all 6 positions are real, its last real token is the last column":
        "0행은 길이 제한에서 잘렸습니다: 6개 위치가 모두 실제 토큰이고, 마지막 실제 토큰이 마지막 열입니다",
    "a batch where one row has one token":
        "한 행에 토큰이 하나뿐인 배치",
    "row 1 has a single real token":
        "1행에는 실제 토큰이 하나뿐입니다",
    "float32 inputs":
        "float32 입력",
    "float32 tensors, as in a real rollout: float32 out":
        "실제 롤아웃처럼 float32 텐서: 결과도 float32",
    "γ = 1 (as in language-model PPO)":
        "γ = 1 (언어 모델 PPO에서처럼)",
    "the lesson's example":
        "수업의 예제",
    "the lesson's response: 5 real tokens, 7.77 stored on the padding, an int64 mask as in the lesson cells":
        "수업의 응답: 실제 토큰 5개, 패딩에 7.77이 저장됨, 수업 셀처럼 int64 마스크",
    "the lesson's walk-through (γ = 1, λ = 0.95)":
        "수업의 단계별 풀이 (γ = 1, λ = 0.95)",
    "λ = 0 (A = δ)":
        "λ = 0 (A = δ)",
    "λ = 1 (reward-to-go minus V)":
        "λ = 1 (보상 합(reward-to-go) 빼기 V)",
    "per-response means (dim=1)":
        "응답별 평균 (dim=1)",
    "per-response means (dim=1), float32":
        "응답별 평균 (dim=1), float32",
    "a bool mask":
        "bool 마스크",
    "the mask may be bool as well as float (1.0 / 0.0)":
        "마스크는 float(1.0 / 0.0)뿐 아니라 bool일 수도 있습니다",
    "a row with no real tokens (dim=1)":
        "실제 토큰이 없는 행 (dim=1)",
    "row 1 has no real token at all: its mean is 0, not NaN (0 / 0)":
        "1행에는 실제 토큰이 하나도 없습니다: 평균은 NaN(0 / 0)이 아니라 0입니다",
    "shift_mean=False (rescale only)":
        "shift_mean=False (크기만 조정)",
    "shift_mean=False, float32":
        "shift_mean=False, float32",
    "unbiased=False":
        "unbiased=False",
    "zeros on the padding (the lesson's batch)":
        "패딩의 0 (수업의 배치)",
    "advantages from masked_gae hold 0 on the padding; those zeros must not be counted":
        "masked_gae의 어드밴티지는 패딩에 0을 담고 있습니다. 그 0들은 세면 안 됩니다",
    "value moves on both sides of the clip range":
        "클리핑 범위 양쪽으로 움직인 value",
    "V - V_old from -0.5 to +0.5 with c = 0.2, returns on either side":
        "V - V_old가 -0.5에서 +0.5까지, c = 0.2, 리턴은 양쪽에 있음",
    "cliprange_value = 0.5":
        "cliprange_value = 0.5",
    "random log-probs (seed 0, 4 x 7)":
        "무작위 로그 확률 (seed 0, 4 x 7)",
    "random log-probs (seed 1, 3 x 12)":
        "무작위 로그 확률 (seed 1, 3 x 12)",
    "the lesson's ratio 0.26 / 0.20":
        "수업의 비율 0.26 / 0.20",
    "0-dim tensors: r = 0.26 / 0.20 = 1.3":
        "0차원 텐서: r = 0.26 / 0.20 = 1.3",
    "very unlikely tokens (log-probs near -110, float32)":
        "가능성이 아주 낮은 토큰 (로그 확률이 -110 근처, float32)",
    "far below any token that is ever sampled, but a robust ratio must not care: exp(-110) is 0 in float32, so only the difference of the log-probs can be exponentiated":
        "실제로 샘플링되는 어떤 토큰보다도 훨씬 낮지만, 튼튼한 비율 계산은 이를 신경 쓰지 않아야 합니다. float32에서 exp(-110)은 0이므로, 로그 확률의 차이에만 exp()를 취할 수 있습니다",
    "ratios on both sides of the clip band, A > 0":
        "클리핑 구간 양쪽의 비율, A > 0",
    "r = [0.5, 0.75, 0.9, 1.1, 1.3, 1.6], cliprange 0.2: for A > 0 the objective stops growing above 1.2":
        "r = [0.5, 0.75, 0.9, 1.1, 1.3, 1.6], cliprange 0.2: A > 0이면 목적값은 1.2 위에서 더 커지지 않습니다",
    "ratios on both sides of the clip band, A < 0":
        "클리핑 구간 양쪽의 비율, A < 0",
    "r = [0.5, 0.75, 0.9, 1.1, 1.3, 1.6], cliprange 0.2: for A < 0 the objective stops growing below 0.8":
        "r = [0.5, 0.75, 0.9, 1.1, 1.3, 1.6], cliprange 0.2: A < 0이면 목적값은 0.8 아래에서 더 커지지 않습니다",
    "both signs of advantage, with padding":
        "부호가 다른 어드밴티지, 패딩 포함",
    "row 0 has A = +1.5, row 1 has A = -0.7 and two padding positions":
        "0행은 A = +1.5, 1행은 A = -0.7이고 패딩 위치가 두 개입니다",
    "cliprange 0.1":
        "cliprange 0.1",
    "extreme values on the padding":
        "패딩의 극단적인 값",
    "the padding holds log-probs of +1000 and -1000 (exp() of their difference is inf) and advantages of ±50: a correct loss, and its gradient, never read them":
        "패딩에는 +1000과 -1000의 로그 확률(그 차이의 exp()는 inf)과 ±50의 어드밴티지가 있습니다. 올바른 손실과 그 그래디언트는 이 값들을 읽지 않습니다",
    "k1 (seed 0, 4 x 7)":
        "k1 (seed 0, 4 x 7)",
    "k2 (seed 1, 4 x 7)":
        "k2 (seed 1, 4 x 7)",
    "k3 (seed 2, 4 x 7)":
        "k3 (seed 2, 4 x 7)",
    "kind left at its default":
        "kind를 기본값으로 둔 경우",
    "k3 with a mask (padding after EOS)":
        "마스크가 있는 k3 (EOS 뒤의 패딩)",
    "with a mask the result is 0 on the padding, whatever the log-probs stored there":
        "마스크가 있으면 패딩에 저장된 로그 확률이 무엇이든 결과는 패딩에서 0입니다",
    "k1 with a mask, float32":
        "마스크가 있는 k1, float32",
    "k3, float32, large log-ratios":
        "k3, float32, 큰 로그 비율",
    "the lesson's response (k1, with a mask)":
        "수업의 응답 (k1, 마스크 있음)",
    "week 5's example: log-ratios 0.9, 1.6, 1.1, 2.0, 1.4 on the real tokens":
        "5주차의 예제: 실제 토큰의 로그 비율 0.9, 1.6, 1.1, 2.0, 1.4",
    "the lesson's response (score 2.40, β = 0.05)":
        "수업의 응답 (점수 2.40, β = 0.05)",
    "5 real tokens, 2 padding positions, an int64 mask: the score lands on position 4":
        "실제 토큰 5개, 패딩 위치 2개, int64 마스크: 점수는 위치 4에 놓입니다",
    "the k3 estimator":
        "k3 추정량",
    "kl_coef 0.5":
        "kl_coef 0.5",
    "Your function read the padding: here it holds inf and NaN, as a real batch can (the log-prob of a token the sampler banned is -inf; a value computed on garbage can overflow), and your result is NaN or inf where the library's is finite. Multiplying by the mask does not remove such values (inf * 0 = NaN, NaN * 0 = NaN): select with torch.where(mask.bool(), x, 0.0) before computing, as the library does.":
        "함수가 패딩을 읽었습니다. 이 사례의 패딩에는 실제 배치에서처럼 inf와 NaN이 들어 있고(샘플러가 금지한 토큰의 로그 확률은 -inf이고, 쓰레기 값으로 계산한 value는 오버플로할 수 있습니다), 라이브러리 결과가 유한한 곳에서 여러분의 결과는 NaN이나 inf입니다. 마스크를 곱해도 이런 값은 사라지지 않습니다(inf * 0 = NaN, NaN * 0 = NaN). 라이브러리처럼 계산 전에 torch.where(mask.bool(), x, 0.0)로 고르세요.",
    "Add eps inside the square root: (x - mean) / sqrt(var + eps). When every real token holds the same value (advantages that are all 0, as a batch whose scores are all 0 can give), the variance is 0 and, without eps, the whitening divides 0 by 0 (NaN).":
        "제곱근 안에 eps를 더하세요: (x - mean) / sqrt(var + eps). 모든 실제 토큰이 같은 값을 가지면(점수가 모두 0인 배치가 줄 수 있는, 전부 0인 어드밴티지처럼) 분산이 0이 되고, eps가 없으면 표준화가 0을 0으로 나눕니다(NaN).",
    "exp() of each log-prob underflows to 0 for very unlikely tokens (log-probs near -110 in float32), and 0 / 0 = NaN: compute the ratio from the difference of the log-probs, exp(logprobs - old_logprobs).":
        "가능성이 아주 낮은 토큰(float32에서 로그 확률이 -110 근처)에서는 로그 확률 각각의 exp()가 0으로 언더플로하고, 0 / 0 = NaN입니다. 비율은 로그 확률의 차이로 계산하세요: exp(logprobs - old_logprobs).",
    "non-finite values on the padding":
        "패딩의 유한하지 않은 값",
    "non-finite values on the padding (dim=1)":
        "패딩의 유한하지 않은 값 (dim=1)",
    "non-finite values on the padding (k3, with a mask)":
        "패딩의 유한하지 않은 값 (k3, 마스크 있음)",
    "the padding holds inf, NaN and -inf, as a real batch can (the log-prob of a token the sampler banned is -inf; a value computed on garbage can overflow): a correct function never reads it, and x * mask does not remove it (inf * 0 = NaN)":
        "패딩에는 실제 배치에서처럼 inf, NaN, -inf가 들어 있습니다(샘플러가 금지한 토큰의 로그 확률은 -inf이고, 쓰레기 값으로 계산한 value는 오버플로할 수 있습니다). 올바른 함수는 패딩을 읽지 않으며, x * mask로는 이 값들이 사라지지 않습니다(inf * 0 = NaN)",
    "every real token equal (all-zero advantages, float32)":
        "모든 실제 토큰이 같은 값 (전부 0인 어드밴티지, float32)",
    "every real token holds 0, as the advantages of a batch whose scores are all 0 can: the variance is 0, and only eps keeps the result from being 0 / 0 = NaN":
        "점수가 모두 0인 배치의 어드밴티지가 그럴 수 있듯, 모든 실제 토큰이 0입니다. 분산은 0이고, eps만이 결과가 0 / 0 = NaN이 되는 것을 막습니다",
    "every real token equal (0.5), unbiased=False":
        "모든 실제 토큰이 같은 값 (0.5), unbiased=False",
    "every real token holds 0.5: the variance is 0 again, here the population variance":
        "모든 실제 토큰이 0.5입니다. 이번에도 분산은 0이며, 여기서는 모분산입니다",
}
