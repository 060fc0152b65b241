-- about: shape arithmetic on `Input Dims` lists (scalar macros).
-- inputs:
-- includes:
-- macros:
--   per_dim(values, i): the i-th entry of a per-spatial-dimension argument (stride, padding, dilation), or its
--     only entry when PyTorch recorded one value for every dimension.
--   broadcast_dims(a, b): the shape two operands broadcast to (NumPy/PyTorch rules: trailing dimensions aligned,
--     a missing or size-1 dimension takes the other's size).

create or replace macro per_dim(values, i) as if(len(values) = 1, values[1], values[i]);

create or replace macro broadcast_dims(a, b) as
    list_transform(range(1, greatest(len(a), len(b)) + 1), lambda i:
        greatest(if(i > greatest(len(a), len(b)) - len(a), a[i - (greatest(len(a), len(b)) - len(a))], 1),
                 if(i > greatest(len(a), len(b)) - len(b), b[i - (greatest(len(a), len(b)) - len(b))], 1)));
