-- ds_close_many: ds_close for several digests of one partition, in one call.
-- KEYS: waiting, ready
-- ARGV: now, partition_ttl, policies x (timeline, digest_id, policy)
-- Reply: per target: closed
-- Needs: parse_time, parse_ttl (guards); refresh_partition_ttl (helpers); apply_moves,
--   close_target, many_targets, new_moves (digests).
--
-- policies and a target's policy: as ds_open_many's. Each target in order; the partition
-- keys' TTL is refreshed once, to the longest that any close asked for. Reply: 1/0 per
-- target (as ds_close's).

local function close_many(keys, args)
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local tag, timelines, ids, policies = many_targets(keys, args, 3)
    local replies, refresh, moves = {}, nil, new_moves()
    for i = 1, #timelines do
        local policy = policies[i]
        local closed, waits = close_target(tag, timelines[i], ids[i], now, policy, moves)
        replies[i] = closed
        if waits and (refresh == nil or policy.ttl > refresh) then
            refresh = policy.ttl > partition_ttl and policy.ttl or partition_ttl
        end
    end
    apply_moves(tag, moves)
    if refresh ~= nil then
        refresh_partition_ttl(tag, refresh)
    end
    return replies
end
