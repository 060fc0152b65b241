-- about: each rank's device matched to the device peaks table (engine/peaks.py: the shipped
--   queries/data/device_peaks.csv, or --peak FILE), and the datatype keys of that table.
-- inputs: ranks, device_peaks
-- includes:
-- macros:
--   peak_dtype(t): the peaks table's datatype key (fp64, fp32, bf16, fp16, fp8, int8) of a PyTorch `Input type`
--     string; null for a non-tensor input or a type without a key.
--   spec_dtype(t): peak_dtype(t), or `other` for a type without a key (its compute spec then has no peak).
--   rank_devices(): per rank: device_name, num_sms (deviceProperties' numSms of the entry of that name), device
--     (the peaks table's device it matched, null when none) and peak_note (why no peak, null when matched). The
--     match: name_pattern is a regular expression over device_name and num_sms, when given, must be equal; among
--     several, the one with num_sms given, then the longest pattern.

create or replace macro peak_dtype(t) as
    case
        when t = 'double' then 'fp64'
        when t = 'float' then 'fp32'
        when t = 'c10::BFloat16' then 'bf16'
        when t = 'c10::Half' then 'fp16'
        when t like 'c10::Float8%' then 'fp8'
        when t in ('signed char', 'unsigned char', 'c10::qint8', 'c10::quint8') then 'int8'
    end;

create or replace macro spec_dtype(t) as coalesce(peak_dtype(t), 'other');

create or replace macro rank_devices() as table
    with props as (
        select r.rank, r.device_name,
               (select try_cast(d ->> 'numSms' as bigint)
                from (select unnest(try_cast(json_extract(r.device_properties, '$[*]') as json[])) as d)
                where d ->> 'name' = r.device_name
                limit 1) as num_sms
        from ranks r
    ),
    candidates as (
        select p.rank, d.device,
               row_number() over (partition by p.rank
                                  order by d.num_sms is null, length(d.name_pattern) desc, d.device) as choice
        from props p
        join (select distinct device, name_pattern, num_sms from device_peaks) d
          on regexp_matches(p.device_name, d.name_pattern) and (d.num_sms is null or d.num_sms = p.num_sms)
    )
    select p.rank, p.device_name, p.num_sms, c.device,
           case
               when c.device is not null then null
               when coalesce(p.device_name, '') = '' then 'unknown device: the trace''s deviceProperties give no name; '
                                                           || 'give --peak FILE'
               else 'unknown device: ' || p.device_name || ' matches no row of the device peaks table; give --peak FILE'
           end as peak_note
    from props p left join candidates c on c.rank = p.rank and c.choice = 1;
