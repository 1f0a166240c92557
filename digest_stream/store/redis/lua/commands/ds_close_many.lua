-- ds_close_many: ds_close for several digests of one partition, in one call.
-- KEYS: waiting, ready
-- ARGV: now, partition_ttl, policies, targets
-- Reply: per target: closed
-- Needs: apply_moves, close_found, digest_is, many_targets, new_moves (digests); batches
--   (batches); digest_key (keys); parse_digest_id, parse_time, parse_ttl (guards).
--
-- policies and a target's policy: as ds_open_many's. Each target in order; the partition
-- keys' TTL is refreshed once, to the longest that any close asked for. Reply: 1/0 per
-- target (as ds_close's).

local function close_many(keys, args)
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local tag, timelines, ids, policies = many_targets(keys, args, 3, true)
    -- a batch-form digest made ordinary first; its writes only once every id is checked
    batches.settle(tag, timelines, policies, now, 'open', function()
        for i = 1, #ids do
            parse_digest_id(ids[i])
        end
    end)
    -- Every target's digest read first: an id that is not its digest's is checked then,
    -- so a malformed one refuses the call before anything is written (an id that is its
    -- digest's was checked when that digest was made: the check of each id cost a close
    -- about 3k instructions).
    local found, holds = {}, {}
    for i = 1, #timelines do
        local digest = digest_key(tag, timelines[i])
        local matches, holds_records = digest_is(digest, ids[i])
        found[i], holds[i] = matches and digest, holds_records
        if not matches then
            parse_digest_id(ids[i])
        end
    end
    local replies, moves = {}, new_moves(partition_ttl)
    for i = 1, #timelines do
        replies[i] = found[i] and close_found(tag, timelines[i], found[i], holds[i], now,
            policies[i], moves) or 0
    end
    apply_moves(tag, moves)
    return replies
end
