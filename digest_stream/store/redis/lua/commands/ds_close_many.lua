-- ds_close_many: ds_close for several digests of one partition, in one call.
-- KEYS: waiting, ready
-- ARGV: now, partition_ttl x (timeline, digest_id, minimum_delay, ttl, next_fire, flush_at)
-- Reply: per target: closed
-- Needs: CLOSE_WIDTH, MAX_OFFSET (Python); parse_digest_id, parse_integer, parse_name,
--   parse_time, parse_ttl (guards); refresh_partition_ttl (helpers); apply_moves, close_target,
--   many_targets, new_moves, parse_next_fire (digests).
--
-- Each target in order; the partition keys' TTL is refreshed once, to the longest that any
-- close asked for. Reply: 1/0 per target (as ds_close's).

local function close_many(keys, args)
    local tag = many_targets(keys, args, 3, CLOSE_WIDTH)
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local targets = {}
    -- The policy fields repeat across targets (most timelines share a policy): each distinct
    -- text is parsed (and checked) once.
    local minimums, ttls, fires, flush_ats = {}, {}, {}, {}
    for base = 3, #args, CLOSE_WIDTH do
        local minimum, ttl, fire, flush_at = args[base + 2], args[base + 3], args[base + 4],
            args[base + 5]
        if minimums[minimum] == nil then
            minimums[minimum] = parse_time(minimum, 'minimum_delay')
        end
        if ttls[ttl] == nil then
            ttls[ttl] = parse_ttl(ttl)
        end
        if fires[fire] == nil then
            fires[fire] = parse_next_fire(fire) or false
        end
        if flush_ats[flush_at] == nil then
            flush_ats[flush_at] = parse_integer(flush_at, 'flush_at', 0, MAX_OFFSET)
        end
        targets[#targets + 1] = {
            parse_name(args[base], 'timeline'), parse_digest_id(args[base + 1]),
            minimums[minimum], ttls[ttl], fires[fire] or nil, flush_ats[flush_at],
        }
    end
    local replies, refresh, moves = {}, nil, new_moves()
    for i, target in ipairs(targets) do
        local closed, waits = close_target(tag, target[1], target[2], now, target[3], target[4],
            target[5], target[6], moves)
        replies[i] = closed
        if waits then
            refresh = math.max(refresh or partition_ttl, target[4])
        end
    end
    apply_moves(tag, moves)
    if refresh ~= nil then
        refresh_partition_ttl(tag, refresh)
    end
    return replies
end
