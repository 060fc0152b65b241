-- question: Which names could a what-if selector of one kind match (for the closest names when one matches nothing)?
-- outputs: replay_selector_names
-- inputs: events
-- includes: lib/categories
-- columns:
--   name: an event name (kernel, op, cpu) or a category (category) the selector compares its pattern with
-- notes: Parameter $selector (kernel, op, category, cpu); the same events as replay/selected.sql looks at.
select distinct name from events
where ($selector = 'kernel' and kind in ('kernel', 'memcpy', 'memset'))
   or ($selector = 'op' and kind in ('cpu_op', 'user_annotation', 'python_function'))
   or ($selector = 'cpu'
       and kind in ('trace', 'user_annotation', 'python_function', 'cpu_op', 'runtime', 'driver', 'overhead', 'other'))
union
select distinct gpu_timeline_category(name, kind) from events
where $selector = 'category' and kind in ('kernel', 'memcpy', 'memset')
union
select distinct op_category(name) from events
where $selector = 'category' and kind = 'cpu_op'
