-- ds_close: closes a timeline's open digest; the timeline waits for its next one.
-- KEYS: timeline, digest, waiting, ready
-- ARGV: timeline, digest_id, now, partition_ttl, policy
-- Reply: closed
-- Needs: apply_moves, close_target, new_moves, timeline_keys (digests); batches (batches);
--   parse_digest_id, parse_policy, parse_time, parse_ttl (guards).
--
-- policy: POLICY_WIDTH arguments (parse_policy); with a calendar schedule (its next fire
-- time) the timeline waits for it instead of a cool-down. Reply: 1 when that digest was
-- closed, 0 for an unknown or already closed id.

local function close(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local digest_id = parse_digest_id(args[2])
    local now = parse_time(args[3], 'now')
    local partition_ttl = parse_ttl(args[4])
    local policy = parse_policy(args, 5)
    batches.settle(tag, {timeline}, {policy}, now, 'open') -- a batch-form digest, made ordinary
    local moves = new_moves(partition_ttl)
    local closed = close_target(tag, timeline, digest_id, now, policy, moves)
    apply_moves(tag, moves)
    return closed
end
