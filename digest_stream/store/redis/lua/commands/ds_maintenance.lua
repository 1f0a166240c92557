-- ds_maintenance: stale READY timelines -> WAITING, one bounded slice per call.
-- KEYS: waiting, ready, fence
-- ARGV: deadline, now, partition_ttl, limit
-- Reply: moved, more
-- Needs: DUE_REPLY, MAX_SLICE (Python); adopt_leading_18 (upgrades); batches (batches);
--   call_tag, digest_key, ready_key, timeline_key, waiting_key (keys); extend_ttl, move_range,
--   refresh_partition_ttl (helpers); format_float, ttl_ms (encoding); parse_integer,
--   parse_time, parse_ttl (guards); snoozes (snoozes).
--
-- Reply: moved: {timeline, ready_since, ...}, up to `limit` timelines READY since before
-- `deadline` moved back to WAITING (due = ready_since), so the next schedule tick hands them
-- out again; more = 1 when further stale ones remain for the next call.

local function maintenance(keys, args)
    local tag = call_tag(keys, 'partition')
    local deadline = parse_time(args[1], 'deadline')
    local now = parse_time(args[2], 'now')
    local partition_ttl = parse_ttl(args[3])
    local limit = parse_integer(args[4], 'limit', 1, MAX_SLICE)
    adopt_leading_18(tag, partition_ttl)
    batches.rotate_index(tag, now)
    -- open batches older than the deadline: their digests made ordinary, READY since their
    -- add, so the move below re-announces them as any other (batches.lua)
    local taken = batches.take_over_batches(tag, deadline, limit)
    local moved, more = move_range(ready_key(tag), waiting_key(tag),
        '(' .. format_float(deadline), function(score) return score end, limit)
    -- A timeline re-announced here is one nobody delivered (delivery down or behind):
    -- its records and open digest must outlive that, so their TTL restarts too.
    local ms = ttl_ms(partition_ttl)
    for i = 1, #moved, 2 do
        extend_ttl(timeline_key(tag, moved[i]), ms)
        extend_ttl(digest_key(tag, moved[i]), ms)
    end
    refresh_partition_ttl(tag, partition_ttl)
    snoozes.keep_alive(tag, now, partition_ttl)
    return {[DUE_REPLY.moved] = moved, [DUE_REPLY.more] = (more or taken) and 1 or 0}
end
