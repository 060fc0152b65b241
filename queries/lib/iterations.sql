-- about: which host events mark an iteration (a training step or a serving engine's iteration), and what their
--   names say (scalar macros).
-- inputs:
-- includes:
-- macros:
--   iteration_marker(kind, name): the marker an event is, or null: 'profiler_step' (ProfilerStep#N, a
--     user_annotation or a legacy cpu_op), 'vllm_annotation' (execute_T_context_C(..)_generation_G(..),
--     execute_context_C(T)_generation_G(T), execute_new_N_cached_M), 'sglang_annotation' (step[MODE bs=B ...]),
--     'vllm_python_frame' (vLLM V1's gpu_model_runner.py(N): execute_model frame). Precedence among them, per
--     rank: profiler_step, then annotations, then frames (iteration_precedence).
--   iteration_precedence(marker): 1 for profiler_step, 2 for the engines' annotations, 3 for frames.
--   iteration_phase(marker, name): prefill, decode or mixed where the marker says (null otherwise).
--   iteration_batch_size(marker, name): sequences in the iteration where the marker says (null otherwise).
--   iteration_tokens(marker, name): tokens the iteration processes where the marker says (null otherwise).
-- notes: The formats, as the engines write them (read in their sources and in TraceLens's tests of them):
--   vLLM's `execute_T_context_C(sqAskB..)_generation_G(sqDskE..)`: C prefill (context) and G decode (generation)
--   requests, sq = summed query lengths, T the scheduled tokens (= A + D; the sum where T is absent); the older
--   `execute_context_C(A)_generation_G(D)` says the same without T; `execute_new_N_cached_M` (vLLM V1 workers):
--   N newly scheduled requests (prefilling) and M running ones; it does not give tokens, and a running request may
--   still be prefilling in chunks, so its phase rests on inference (decode when N = 0). SGLang's
--   `step[MODE bs=B]` / `step[MODE bs=B toks=T]`: MODE EXTEND or PREFILL is prefill, DECODE (and TARGET_VERIFY,
--   speculative decoding's verify pass) decode, MIXED mixed; a DECODE step does not say its tokens (one per
--   sequence without speculative decoding), so tokens is null there. vLLM's execute_model frame says nothing of
--   the batch: phase, batch size and tokens are null.

-- (each regexp behind a test of the prefix or suffix it requires: most names are tested by those alone, a regexp
-- per name was most of the step windows' time on traces of 90k Python frames)
create or replace macro iteration_marker(kind, name) as
    case
        when kind in ('user_annotation', 'cpu_op') and starts_with(name, 'ProfilerStep#')
             and regexp_matches(name, '^ProfilerStep#\d+$') then 'profiler_step'
        when kind <> 'user_annotation' then
            case when kind = 'python_function' and ends_with(name, ': execute_model')
                      and regexp_matches(name, '(^|/)v1/worker/gpu_model_runner\.py\(\d+\): execute_model$')
                 then 'vllm_python_frame' end
        when starts_with(name, 'execute_')
             and (regexp_matches(name, '^execute_(\d+_)?context_\d+\([^)]*\)_generation_\d+\([^)]*\)$')
                  or regexp_matches(name, '^execute_new_\d+_cached_\d+$')) then 'vllm_annotation'
        when starts_with(name, 'step[') and regexp_matches(name, '^step\[[A-Z_]+ bs=\d+( toks=\d+)?[^\]]*\]$')
            then 'sglang_annotation'
    end;

create or replace macro iteration_precedence(marker) as
    case marker when 'profiler_step' then 1 when 'vllm_python_frame' then 3 else 2 end;

-- the numbers a vLLM annotation gives: context requests, their tokens, generation requests, their tokens
create or replace macro _vllm_counts(name) as
    case
        when regexp_matches(name, '^execute_new_') then struct_pack(
            context := try_cast(regexp_extract(name, '^execute_new_(\d+)', 1) as bigint), context_tokens := null::bigint,
            generation := try_cast(regexp_extract(name, '_cached_(\d+)$', 1) as bigint), generation_tokens := null::bigint)
        when regexp_matches(name, '_context_\d+\(sq') then struct_pack(
            context := try_cast(regexp_extract(name, '_context_(\d+)\(', 1) as bigint),
            context_tokens := try_cast(regexp_extract(name, '_context_\d+\(sq(\d+)', 1) as bigint),
            generation := try_cast(regexp_extract(name, '_generation_(\d+)\(', 1) as bigint),
            generation_tokens := try_cast(regexp_extract(name, '_generation_\d+\(sq(\d+)', 1) as bigint))
        else struct_pack(
            context := try_cast(regexp_extract(name, '_context_(\d+)\(', 1) as bigint),
            context_tokens := try_cast(regexp_extract(name, '_context_\d+\((\d+)\)', 1) as bigint),
            generation := try_cast(regexp_extract(name, '_generation_(\d+)\(', 1) as bigint),
            generation_tokens := try_cast(regexp_extract(name, '_generation_\d+\((\d+)\)', 1) as bigint))
    end;

create or replace macro _sglang_mode(name) as regexp_extract(name, '^step\[([A-Z_]+)', 1);

-- _iteration_phase, _iteration_batch_size, _iteration_tokens (marker, name, counts): the three below, given
-- COUNTS = _vllm_counts(name) as a column: a macro's argument is copied into its body at each use, so the public
-- ones bind the counts' twelve regexps at each of their seven uses. step_windows computes the counts once a row and
-- calls these (its statement on empty tables: 16.4 -> 11.9 ms, bench/RESULTS.md)
create or replace macro _iteration_phase(marker, name, counts) as
    case marker
        when 'vllm_annotation' then
            case when counts.context > 0 and counts.generation > 0 then 'mixed'
                 when counts.context > 0 then 'prefill'
                 when counts.generation > 0 then 'decode' end
        when 'sglang_annotation' then
            case when _sglang_mode(name) in ('EXTEND', 'PREFILL') then 'prefill'
                 when _sglang_mode(name) in ('DECODE', 'TARGET_VERIFY') then 'decode'
                 when _sglang_mode(name) = 'MIXED' then 'mixed' end
    end;

create or replace macro _iteration_batch_size(marker, name, counts) as
    case marker
        when 'vllm_annotation' then counts.context + counts.generation
        when 'sglang_annotation' then try_cast(regexp_extract(name, ' bs=(\d+)', 1) as bigint)
    end;

create or replace macro _iteration_tokens(marker, name, counts) as
    case marker
        when 'vllm_annotation' then coalesce(try_cast(regexp_extract(name, '^execute_(\d+)_context_', 1) as bigint),
                                             counts.context_tokens + counts.generation_tokens)
        when 'sglang_annotation' then try_cast(regexp_extract(name, ' toks=(\d+)', 1) as bigint)
    end;

create or replace macro iteration_phase(marker, name) as _iteration_phase(marker, name, _vllm_counts(name));

create or replace macro iteration_batch_size(marker, name) as _iteration_batch_size(marker, name, _vllm_counts(name));

create or replace macro iteration_tokens(marker, name) as _iteration_tokens(marker, name, _vllm_counts(name));
