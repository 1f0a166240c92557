-- ds_open_many: ds_open for several timelines of one partition, in one call.
-- KEYS: waiting, ready
-- ARGV: now, policies, targets
-- Reply: per target: id, opened_at, dropped, records, expired, cause
-- Needs: batches (batches); many_targets, open_target (digests); parse_time (guards).
--
-- policies: their count, then POLICY_WIDTH arguments each (parse_policies); targets: ONE
-- packed argument, TARGET_FORMAT each (policy index from 1, timeline, digest id;
-- many_targets). Each target in order (a repeated timeline
-- reopens). Reply: one per target, open_target's, or 0 for a timeline that is not READY
-- (not an error: the other targets are still opened).

local function open_many(keys, args)
    local now = parse_time(args[1], 'now')
    local tag, timelines, ids, policies = many_targets(keys, args, 2)
    batches.settle(tag, timelines, policies, now, 'open') -- a batch-form digest, made ordinary
    local replies = {}
    for i = 1, #timelines do
        replies[i] = open_target(tag, timelines[i], ids[i], now, policies[i]) or 0
    end
    return replies
end
