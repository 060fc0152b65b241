-- question: For each GPU op a graph launch replayed, which captured launch is it, and under which op was that made?
-- inputs: graph_pairs, graph_choices, captured_launches
-- columns:
--   rank: rank
--   id: events.id of the replayed GPU op
--   launch: events.id of the graph launch call
--   capture_file: the capture trace
--   graph: the captured graph
--   position: the captured launch's index in the graph
--   captured_kernel: the kernel name the captured launch call recorded (null when none)
--   match: name or position (graph_pairs.sql)
--   graphs_fitting: captured graphs that fit the launch as well (graph_choices.sql)
--   owner_kind: op, annotation, python_frame or none
--   op_call: events.id of the owner in the capture trace
--   op_name: the owner's name
--   input_dims: the owner's Input Dims (JSON)
--   input_type: the owner's Input type (JSON)
--   module: innermost nn.Module frame
--   module_stack: the nn.Module frames, outermost first (JSON)
-- notes: The `graph_kernels` table (schema.py): the pairs of the graph each launch replayed (graph_choices.sql).
select p.rank, p.id, p.launch, p.capture_file, p.graph, p.position, c.kernel_name as captured_kernel, p.match,
       ch.graphs_fitting, c.owner_kind, c.op_call, c.op_name, c.input_dims, c.input_type, c.module, c.module_stack
from graph_pairs p
join graph_choices ch on ch.rank = p.rank and ch.launch = p.launch and ch.capture_file = p.capture_file
    and ch.graph = p.graph
join captured_launches c on c.rank = p.rank and c.capture_file = p.capture_file and c.graph = p.graph
    and c.position = p.position
order by p.rank, p.id
