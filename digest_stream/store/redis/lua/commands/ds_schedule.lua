-- ds_schedule: due WAITING timelines -> READY, one bounded slice of the backlog per call.
-- KEYS: waiting, ready, fence
-- ARGV: now, partition_ttl, limit
-- Reply: moved, more
-- Needs: DUE_REPLY, MAX_SLICE (Python); parse_integer, parse_time, parse_ttl (guards);
--   call_tag, ready_key, waiting_key (keys); format_float (encoding); move_range,
--   refresh_partition_ttl (helpers); adopt_leading_18 (upgrades).
--
-- Reply: moved: {timeline, due, ...}, up to `limit` timelines moved WAITING -> READY
-- (earliest due first); more = 1 when further due ones remain for the next call.

local function schedule(keys, args)
    local tag = call_tag(keys, 'partition')
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local limit = parse_integer(args[3], 'limit', 1, MAX_SLICE)
    adopt_leading_18(tag, partition_ttl)
    local ready_at = format_float(now)
    local moved, more = move_range(waiting_key(tag), ready_key(tag), ready_at, function()
        return ready_at
    end, limit)
    refresh_partition_ttl(tag, partition_ttl)
    return {[DUE_REPLY.moved] = moved, [DUE_REPLY.more] = more and 1 or 0}
end
