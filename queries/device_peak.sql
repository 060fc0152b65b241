-- question: Which device did each rank run on, and which peaks are its ops and collectives held to?
-- inputs: ranks, device_peaks
-- includes: lib/peaks
-- columns:
--   rank: rank
--   device_name: the GPU's name in the trace's deviceProperties
--   device: the peaks table's device it matched (null: unknown)
--   dtype: datatype of the peak row (fp64, fp32, tf32, bf16, fp16, fp8, int8); null for an unknown device
--   matrix_tflops: TFLOP/s, dense matrix (tensor core) peak
--   vector_tflops: TFLOP/s, vector peak
--   hbm_tb_per_s: TB/s, HBM bandwidth
--   link_gb_per_s: GB/s, per-GPU link bandwidth in one direction (NVLink, Infinity Fabric)
--   source: where the numbers come from (vendor datasheet)
--   peak_note: why the rank has no peaks (an unknown device: percent_of_peak is null in op_perf and roofline)
-- notes: The peaks table is queries/data/device_peaks.csv unless --peak FILE replaced it; the match is lib/peaks.sql's
--   rank_devices() (docs/perf_models.md).
select d.rank, d.device_name, d.device, p.dtype, p.matrix_tflops, p.vector_tflops, p.hbm_tb_per_s, p.link_gb_per_s,
       p.source, d.peak_note
from rank_devices() d
left join device_peaks p on p.device = d.device
order by d.rank, array_position(['fp64', 'fp32', 'tf32', 'bf16', 'fp16', 'fp8', 'int8'], p.dtype)
