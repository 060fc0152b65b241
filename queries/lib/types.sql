-- about: element sizes of the dtypes PyTorch's profiler writes in `Input type` (scalar macros).
-- inputs:
-- includes:
-- macros:
--   dtype_bytes(t): bytes per element, null for a non-tensor input (Scalar, TensorList, '', ...) or an unknown
--     type.
--   dims_numel(dims): elements of a shape given as a list of sizes (1 for [] : a 0-dim tensor or a scalar).

create or replace macro dtype_bytes(t) as
    case
        when t in ('double', 'long int', 'long', 'int64_t', 'c10::complex<float>', 'unsigned long') then 8
        when t in ('float', 'int', 'unsigned int', 'c10::complex<c10::Half>') then 4
        when t in ('c10::BFloat16', 'c10::Half', 'short int', 'short', 'unsigned short') then 2
        when t in ('bool', 'signed char', 'unsigned char', 'c10::Float8_e4m3fn', 'c10::Float8_e5m2',
                   'c10::Float8_e4m3fnuz', 'c10::Float8_e5m2fnuz', 'c10::Float8_e8m0fnu', 'c10::quint8',
                   'c10::qint8') then 1
        when t = 'c10::complex<double>' then 16
    end;

create or replace macro dims_numel(dims) as coalesce(list_product(dims), 1)::bigint;
