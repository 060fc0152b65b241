-- prelude: category rules shared by the analyses (scalar macros).
-- Run by tracekit.analyses before any query (files named _*.sql are preludes, in name order).
--   gpu_timeline_category(name, kind): TraceLens's GPU timeline split: communication = kernels named *nccl* or
--     *rccl* (any case), memcpy = memcpy ops, computation = every other kernel and every memset.

create or replace macro gpu_timeline_category(name, kind) as
    case
        when kind = 'memcpy' then 'memcpy'
        when kind = 'kernel' and regexp_matches(name, '(?i)nccl|rccl') then 'communication'
        else 'computation'
    end;
