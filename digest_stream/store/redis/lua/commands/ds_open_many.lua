-- ds_open_many: ds_open for several timelines of one partition, in one call.
-- KEYS: waiting, ready
-- ARGV: now x (timeline, digest_id, ttl)
-- Reply: per target: id, opened_at, dropped, records, expired, cause
-- Needs: OPEN_WIDTH (Python); parse_digest_id, parse_name, parse_time, parse_ttl (guards);
--   many_targets, open_target (digests).
--
-- Each target in order (a repeated timeline reopens). Reply: one per target, open_target's,
-- or 0 for a timeline that is not READY (not an error: the other targets are still opened).

local function open_many(keys, args)
    local tag = many_targets(keys, args, 2, OPEN_WIDTH)
    local now = parse_time(args[1], 'now')
    -- every target checked before the first open; the ttl repeats across targets (most
    -- timelines share a policy): each distinct text is parsed once
    local ttls = {}
    for base = 2, #args, OPEN_WIDTH do
        parse_name(args[base], 'timeline')
        parse_digest_id(args[base + 1])
        local ttl = args[base + 2]
        if ttls[ttl] == nil then
            ttls[ttl] = parse_ttl(ttl)
        end
    end
    local replies, count = {}, 0
    for base = 2, #args, OPEN_WIDTH do
        count = count + 1
        replies[count] = open_target(tag, args[base], args[base + 1], now, ttls[args[base + 2]])
            or 0
    end
    return replies
end
