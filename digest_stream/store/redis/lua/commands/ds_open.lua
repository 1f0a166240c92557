-- ds_open: opens (or reopens) a READY timeline's digest.
-- KEYS: timeline, digest, waiting, ready
-- ARGV: timeline, digest_id, now, ttl
-- Reply: id, opened_at, dropped, records, expired, cause
-- Needs: invalid_state, parse_digest_id, parse_time, parse_ttl (guards); open_target,
--   timeline_keys (digests).
--
-- Reply: open_target's; a timeline that is not READY is refused (invalid_state).

local function open(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local digest_id = parse_digest_id(args[2])
    local now = parse_time(args[3], 'now')
    local ttl = parse_ttl(args[4])
    local reply = open_target(tag, timeline, digest_id, now, ttl)
    if reply == nil then
        invalid_state('timeline is not ready: ' .. timeline)
    end
    return reply
end
