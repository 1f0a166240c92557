-- schedule.lua: ds_schedule (due WAITING timelines -> READY) and ds_maintenance (stale
-- READY timelines -> WAITING), each one bounded slice of the backlog per call.
-- Holds: schedule, maintenance.
-- Needs: MAX_SLICE (written from Python); the guards, keys and encoding parts; extend_ttl,
--   move_range, refresh_partition_ttl (helpers).

-- KEYS: waiting, ready, fence. ARGV: now, partition_ttl, limit.
-- Returns {{timeline, due, ...}, more}: up to `limit` timelines moved WAITING -> READY
-- (earliest due first), more = 1 when further due ones remain for the next call.
local function schedule(keys, args)
    local tag = partition_tag_of(keys)
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local limit = parse_integer(args[3], 'limit', 1, MAX_SLICE)
    local ready_at = format_float(now)
    local moved, more = move_range(waiting_key(tag), ready_key(tag), ready_at, function()
        return ready_at
    end, limit)
    refresh_partition_ttl(tag, partition_ttl)
    return {moved, more and 1 or 0}
end

-- KEYS: waiting, ready, fence. ARGV: deadline, now, partition_ttl, limit.
-- Returns {{timeline, ready_since, ...}, more}: up to `limit` timelines moved READY ->
-- WAITING (due = ready_since), so the next schedule tick hands them out again; more = 1
-- when further stale ones remain for the next call.
local function maintenance(keys, args)
    local tag = partition_tag_of(keys)
    local deadline = parse_time(args[1], 'deadline')
    parse_time(args[2], 'now')
    local partition_ttl = parse_ttl(args[3])
    local limit = parse_integer(args[4], 'limit', 1, MAX_SLICE)
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
    return {moved, more and 1 or 0}
end
