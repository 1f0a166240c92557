-- ds_stats: counts a partition's WAITING and READY timelines (read-only).
-- KEYS: waiting, ready, fence
-- ARGV: none
-- Reply: waiting, ready, oldest_due, fence
-- Needs: STATS_REPLY (Python); batches (batches); call_tag, ready_key, waiting_key (keys);
--   read_fence (helpers).
--
-- Reply: oldest_due and fence nil when none.

local function stats(keys, _)
    local tag = call_tag(keys, 'partition')
    local oldest = redis.call('ZRANGE', waiting_key(tag), 0, 0, 'WITHSCORES')
    local fence = read_fence(tag)
    return {
        [STATS_REPLY.waiting] = redis.call('ZCARD', waiting_key(tag)),
        [STATS_REPLY.ready] = redis.call('ZCARD', ready_key(tag)) + batches.leading_ready_count(tag),
        [STATS_REPLY.oldest_due] = oldest[2] or false,
        [STATS_REPLY.fence] = fence or false,
    }
end
