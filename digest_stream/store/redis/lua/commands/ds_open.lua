-- ds_open: opens (or reopens) a READY timeline's digest.
-- KEYS: timeline, digest, waiting, ready
-- ARGV: timeline, digest_id, now, policy
-- Reply: id, opened_at, dropped, records, expired, cause
-- Needs: batches (batches); invalid_state, parse_digest_id, parse_policy, parse_time (guards);
--   open_target, timeline_keys (digests).
--
-- policy: POLICY_WIDTH arguments (parse_policy). Reply: open_target's; a timeline that is not
-- READY is refused (invalid_state).

local function open(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local digest_id = parse_digest_id(args[2])
    local now = parse_time(args[3], 'now')
    local policy = parse_policy(args, 4)
    batches.settle(tag, {timeline}, {policy}, now, 'open') -- a batch-form digest, made ordinary
    local reply = open_target(tag, timeline, digest_id, now, policy)
    if reply == nil then
        invalid_state('timeline is not ready: ' .. timeline)
    end
    return reply
end
