-- question: Where does each op call shape sit on the device's roofline, and which shapes take the time?
-- inputs: op_perf, ranks, device_peaks
-- includes: lib/peaks
-- columns:
--   rank: rank
--   series: what the row is: `op shapes` (one modelled call shape), or a roof of the device's peaks
--     (`roof: matrix DTYPE`, `roof: vector DTYPE`: three points each, memory slope to the ridge, then flat)
--   name: op name (null on roof rows)
--   category: op_perf's family (null on roof rows)
--   input_dims: compact JSON text (null on roof rows)
--   compute_spec: matrix_DTYPE or vector_DTYPE
--   count: calls
--   kernel_total_us: µs, summed subtree kernel time of the calls
--   percent_of_time: %, of the modelled shapes' kernel time on the rank (shapes nested in another are left out)
--   arithmetic_intensity: FLOP/byte (x of the chart)
--   tflops_per_s: TFLOP/s achieved (y of the chart); on roof rows, the attainable rate at that intensity
--   bound: compute or memory
--   percent_of_peak: %, op_perf's share of the bounding resource
-- notes: Shapes with no FLOPs, no kernel time or nested in another modelled call (aten::linear's addmm) are left
--   out, so each kernel's time counts once. The roofs are drawn for the compute specs of the rank's two largest
--   shares of modelled kernel time (matrix and vector), from intensity 0.01 to 10,000 FLOP/byte; a rank whose device
--   is unknown has no roof rows.
with
shapes as (
    select rank, 'op shapes' as series, name, category, input_dims, compute_spec, count, kernel_total_us,
           -- summed in integer ns: the same bits in any order
           100 * kernel_total_us / (sum(round(kernel_total_us * 1e3)::bigint) over (partition by rank) / 1e3)
               as percent_of_time,
           arithmetic_intensity, tflops_per_s, bound, percent_of_peak
    from op_perf
    where not nested and gflops_per_call > 0 and kernel_total_us > 0 and bytes_per_call > 0
),
specs as (  -- the compute spec of each kind with most time: matrix and vector
    select rank, compute_spec, kind
    from (select rank, compute_spec, split_part(compute_spec, '_', 1) as kind,
                 row_number() over (partition by rank, split_part(compute_spec, '_', 1)
                                    order by sum(kernel_total_us) desc, compute_spec) as choice
          from shapes group by rank, compute_spec)
    where choice = 1
),
roofs as (
    select s.rank, 'roof: ' || replace(s.compute_spec, '_', ' ') as series, s.compute_spec,
           if(s.kind = 'matrix', p.matrix_tflops, p.vector_tflops) as peak, p.hbm_tb_per_s as bandwidth
    from specs s
    join rank_devices() d on d.rank = s.rank
    join device_peaks p on p.device = d.device and p.dtype = split_part(s.compute_spec, '_', 2)
    where if(s.kind = 'matrix', p.matrix_tflops, p.vector_tflops) > 0
),
roof_points as (
    select rank, series, compute_spec, x as arithmetic_intensity, least(peak, x * bandwidth) as tflops_per_s
    from (select *, unnest([0.01, peak / bandwidth, 10000.0]) as x from roofs)
)
select rank, series, name, category, input_dims, compute_spec, count, kernel_total_us, percent_of_time,
       arithmetic_intensity, tflops_per_s, bound, percent_of_peak
from shapes
union all
select rank, series, null, null, null, compute_spec, null, null, null, arithmetic_intensity, tflops_per_s, null, null
from roof_points
order by rank, series = 'op shapes' desc, kernel_total_us desc nulls last, series, arithmetic_intensity, name,
         input_dims, compute_spec, count, tflops_per_s, percent_of_peak
