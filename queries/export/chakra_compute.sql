-- question: How many arithmetic operations and tensor bytes does each GEMM or convolution kernel do (the
--   num_ops and tensor_size of a Chakra compute node, which ASTRA-sim's roofline model runs on)?
-- inputs: events, edges
-- includes: lib/launches, lib/types
-- columns:
--   rank: rank
--   id: events.id of the kernel (its Chakra node id)
--   op_id: events.id of the op whose shapes give the numbers
--   op_name: that op's name
--   model: gemm, conv or conv_backward
--   num_ops: operations (a multiply-add counts 2), null where the op's shapes do not give them
--   tensor_size: bytes, the op's tensor inputs and outputs, null where the shapes do not give them
-- notes: From the op's Input Dims, Input type and Concrete Inputs; each op's numbers go to the longest kernel it
--   launched (cuBLAS/cuDNN helpers such as memsets or scale kernels get none). GEMM: the innermost op of the
--   kernel's launch call is aten::mm or _scaled_mm (A[M,K], B[K,N]), addmm (bias, A, B), bmm (A[b,M,K],
--   B[b,K,N]) or baddbmm (bias, A, B as bmm): num_ops = 2·b·M·N·K (the bias add of addmm is fused into the
--   kernel's epilogue and not counted); tensor_size = A + B (+ bias) + the b·M·N output, each at its dtype's
--   size. Shapes whose inner dimensions disagree give nulls. Convolution: the nearest aten::convolution or
--   aten::_convolution above the launch call (input [N, C, spatial...], weight [K, C/groups, kernel...],
--   Concrete Inputs stride, padding, dilation, transposed): output size per spatial dim
--   floor((in + 2·pad − dil·(k − 1) − 1) / stride) + 1, num_ops = 2·N·(output spatial elements)·(weight
--   elements), tensor_size = input + weight + output. Without Concrete Inputs (older profilers) or for a
--   transposed convolution the output size is not known: nulls. Convolution backward: aten::convolution_backward
--   (grad_output, input, weight, ..., output_mask) or aten::cudnn_convolution_backward (input, grad_output,
--   weight, ...): the output size is grad_output's, num_ops = (gradients asked for, of input and weight; both
--   where output_mask is not recorded) · 2·N·(grad_output spatial elements)·(weight elements), tensor_size =
--   grad_output + input + weight + the gradients written.
with
kernels as materialized (
    select rank, id, dur, call_id from gpu_ops() where kind = 'kernel' and call_id is not null
),
described as materialized (
    -- the op whose shapes describe each launch call's kernels: the innermost GEMM op, else the nearest
    -- convolution op (by name: convolution over _convolution; their argument lists agree)
    select a.rank, a.call_id, a.op_id, o.name, o.input_dims, o.input_type, o.concrete_inputs,
           row_number() over (partition by a.rank, a.call_id order by
               case when a.innermost and o.name in ('aten::mm', 'aten::_scaled_mm', 'aten::addmm', 'aten::bmm',
                                                    'aten::baddbmm') then 1
                    when o.name = 'aten::convolution_backward' then 2
                    when o.name = 'aten::cudnn_convolution_backward' then 3
                    when o.name = 'aten::convolution' then 4
                    else 5 end, a.op_id desc) as choice
    from launch_op_ancestors() a
    join events o on o.rank = a.rank and o.id = a.op_id
    where (a.innermost and o.name in ('aten::mm', 'aten::_scaled_mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm'))
       or o.name in ('aten::convolution', 'aten::_convolution', 'aten::convolution_backward',
                     'aten::cudnn_convolution_backward')
),
main_kernel as (  -- each op's longest kernel carries its numbers
    select k.rank, k.id, d.op_id, d.name, d.input_dims, d.input_type, d.concrete_inputs,
           row_number() over (partition by k.rank, d.op_id order by k.dur desc nulls last, k.id) as longest
    from kernels k
    join described d on d.rank = k.rank and d.call_id = k.call_id and d.choice = 1
),
shaped as (
    select rank, id, op_id, name,
           case when name in ('aten::mm', 'aten::_scaled_mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm') then 'gemm'
                when name in ('aten::convolution', 'aten::_convolution') then 'conv'
                else 'conv_backward' end as model,
           try_cast(input_dims as bigint[][]) as dims,
           try_cast(input_type as varchar[]) as types,
           try_cast(concrete_inputs as varchar[]) as concrete
    from main_kernel where longest = 1
),
gemm as (
    select *, dims_numel(a) * dtype_bytes(a_type) as a_bytes, dims_numel(b) * dtype_bytes(b_type) as b_bytes,
           if(bias is null or len(bias) = 0, 0, dims_numel(bias) * coalesce(dtype_bytes(bias_type), 0)) as bias_bytes,
           case when len(a) = 2 and len(b) = 2 and a[2] = b[1] then 1
                when len(a) = 3 and len(b) = 3 and a[1] = b[1] and a[3] = b[2] then a[1] end as batch
    from (
        select rank, id, op_id, name, model,
               dims[if(name in ('aten::addmm', 'aten::baddbmm'), 2, 1)] as a,
               dims[if(name in ('aten::addmm', 'aten::baddbmm'), 3, 2)] as b,
               if(name in ('aten::addmm', 'aten::baddbmm'), dims[1], null) as bias,
               types[if(name in ('aten::addmm', 'aten::baddbmm'), 2, 1)] as a_type,
               types[if(name in ('aten::addmm', 'aten::baddbmm'), 3, 2)] as b_type,
               if(name in ('aten::addmm', 'aten::baddbmm'), types[1], null) as bias_type
        from shaped where model = 'gemm'
    )
),
gemm_costed as (
    select rank, id, op_id, name, model,
           2 * batch * a[-2] * b[-1] * a[-1] as num_ops,
           a_bytes + b_bytes + bias_bytes + batch * a[-2] * b[-1] * dtype_bytes(a_type) as tensor_size
    from gemm where batch is not null
),
conv as (
    select rank, id, op_id, name, model, dims[1] as x, dims[2] as w, types[1] as x_type,
           try_cast(concrete[4] as bigint[]) as stride, try_cast(concrete[5] as bigint[]) as padding,
           try_cast(concrete[6] as bigint[]) as dilation, lower(concrete[7]) as transposed
    from shaped where model = 'conv'
),
conv_out as (
    select *,
           list_transform(range(1, len(x) - 1), lambda i:
               (x[i + 2] + 2 * padding[least(i, len(padding))] - dilation[least(i, len(dilation))] * (w[i + 2] - 1) - 1)
                   // stride[least(i, len(stride))] + 1) as out_spatial
    from conv
    where len(x) >= 3 and len(w) = len(x) and transposed = 'false'
      and len(stride) > 0 and len(padding) > 0 and len(dilation) > 0
),
conv_costed as (
    select rank, id, op_id, name, model,
           2 * x[1] * dims_numel(out_spatial) * dims_numel(w) as num_ops,
           (dims_numel(x) + dims_numel(w) + x[1] * w[1] * dims_numel(out_spatial)) * dtype_bytes(x_type) as tensor_size
    from conv_out
    where list_min(out_spatial) > 0
),
conv_backward as (
    select rank, id, op_id, name, model,
           dims[if(name = 'aten::convolution_backward', 1, 2)] as grad_out,
           dims[if(name = 'aten::convolution_backward', 2, 1)] as x,
           dims[3] as w,
           types[1] as x_type,
           -- gradients of input and weight asked for (output_mask), both when the trace does not say
           coalesce(len(list_filter(list_slice(try_cast(concrete[11] as varchar[]), 1, 2),
                                    lambda m: lower(trim(m)) = 'true')), 2) as gradients,
           try_cast(concrete[11] as varchar[]) as mask
    from shaped where model = 'conv_backward'
),
conv_backward_costed as (
    select rank, id, op_id, name, model,
           gradients * 2 * grad_out[1] * dims_numel(list_slice(grad_out, 3, len(grad_out))) * dims_numel(w) as num_ops,
           (dims_numel(grad_out) + dims_numel(x) + dims_numel(w)
            + if(mask is null or lower(trim(mask[1])) = 'true', dims_numel(x), 0)
            + if(mask is null or lower(trim(mask[2])) = 'true', dims_numel(w), 0)) * dtype_bytes(x_type) as tensor_size
    from conv_backward
    where len(grad_out) >= 3 and len(w) = len(grad_out) and len(x) = len(grad_out) and grad_out[2] = w[1]
)
select s.rank, s.id, s.op_id, s.name as op_name, s.model,
       coalesce(g.num_ops, c.num_ops, b.num_ops)::bigint as num_ops,
       coalesce(g.tensor_size, c.tensor_size, b.tensor_size)::bigint as tensor_size
from shaped s
left join gemm_costed g on g.rank = s.rank and g.id = s.id
left join conv_costed c on c.rank = s.rank and c.id = s.id
left join conv_backward_costed b on b.rank = s.rank and b.id = s.id
order by s.rank, s.id
