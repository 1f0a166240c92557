-- commands.lua: the command table: every function the library registers, and its flags.
-- Holds: version, READ_ONLY and the redis.register_function lines (nothing after them).
-- Needs: LIBRARY_VERSION (written from Python); the commands of add, schedule, digests
--   and admin.

local function version(_, _)
    return LIBRARY_VERSION
end

local READ_ONLY = {'no-writes'}

redis.register_function{function_name = 'ds_version', callback = version, flags = READ_ONLY}
redis.register_function{function_name = 'ds_add', callback = add}
redis.register_function{function_name = 'ds_schedule', callback = schedule}
redis.register_function{function_name = 'ds_maintenance', callback = maintenance}
redis.register_function{function_name = 'ds_open', callback = open}
redis.register_function{function_name = 'ds_close', callback = close}
redis.register_function{function_name = 'ds_open_many', callback = open_many}
redis.register_function{function_name = 'ds_close_many', callback = close_many}
redis.register_function{function_name = 'ds_delete', callback = delete}
redis.register_function{function_name = 'ds_inspect', callback = inspect, flags = READ_ONLY}
redis.register_function{function_name = 'ds_stats', callback = stats, flags = READ_ONLY}
redis.register_function{function_name = 'ds_fence_get', callback = fence_get, flags = READ_ONLY}
redis.register_function{function_name = 'ds_fence_set', callback = fence_set}
